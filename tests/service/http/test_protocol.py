"""CoalescingTransport: a response's small writes leave as one, in order; big writes are not copied."""

from __future__ import annotations

import asyncio

from service.http.protocol import JOIN_BELOW_BYTES, CoalescingTransport


class RecordingTransport:
    """Stands in for the socket transport: records each write and whether close came after it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> str:
        return f"extra:{name}"


def pair() -> tuple[RecordingTransport, CoalescingTransport]:
    """A recording transport and the coalescing proxy in front of it (call inside a running loop)."""
    real = RecordingTransport()
    return real, CoalescingTransport(real, asyncio.get_running_loop())


def test_writes_of_one_loop_pass_leave_as_one_in_order():
    async def scenario() -> RecordingTransport:
        real, coalescing = pair()
        coalescing.write(b"HTTP/1.1 200 OK\r\n\r\n")
        coalescing.write(b'{"a": 1}')
        assert real.writes == []  # nothing sent before the loop pass ends
        await asyncio.sleep(0)
        assert real.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"a": 1}']
        coalescing.write(b"next")
        await asyncio.sleep(0)
        assert real.writes[-1] == b"next"
        assert coalescing.get_extra_info("peername") == "extra:peername"  # the rest is the real transport's
        return real

    assert len(asyncio.run(scenario()).writes) == 2


def test_a_big_write_sends_what_is_pending_first_then_goes_uncopied():
    async def scenario() -> None:
        real, coalescing = pair()
        big = b"x" * JOIN_BELOW_BYTES
        coalescing.write(b"headers")
        coalescing.write(big)
        assert real.writes == [b"headers", big]
        await asyncio.sleep(0)
        assert real.writes == [b"headers", big]  # the scheduled flush finds nothing left

    asyncio.run(scenario())


def test_close_sends_pending_writes_first_and_nothing_follows():
    async def scenario() -> None:
        real, coalescing = pair()
        coalescing.write(b"last answer")
        coalescing.close()
        assert real.writes == [b"last answer"] and real.closed
        await asyncio.sleep(0)  # the flush scheduled by the write runs on a closed transport: no write
        assert real.writes == [b"last answer"]

    asyncio.run(scenario())


def test_writelines_keeps_the_order_of_pending_writes():
    async def scenario() -> None:
        real, coalescing = pair()
        coalescing.write(b"a")
        coalescing.writelines([b"b", b"c" * JOIN_BELOW_BYTES, b"d"])
        await asyncio.sleep(0)
        assert b"".join(real.writes) == b"ab" + b"c" * JOIN_BELOW_BYTES + b"d"

    asyncio.run(scenario())


def test_the_switch_serves_the_app_with_uvicorns_writes(monkeypatch, model_dir, scenarios):
    """GRIDPFN_COALESCE_WRITES=false: `gridpfn serve` hands uvicorn's httptools protocol (with bounded heads) over, and it serves the app."""
    import threading
    import time

    import httpx
    import uvicorn

    from service.http.app import create_app
    from service.http.protocol import CoalescingHttpToolsProtocol, GuardedHttpToolsProtocol, protocol_for
    from service.settings import Settings
    from tests.service.conftest import MODEL, free_port, rows

    monkeypatch.setenv("GRIDPFN_COALESCE_WRITES", "false")
    settings = Settings(model_dir=model_dir, redis_url=None, gp_max_iter=1)
    assert protocol_for(settings.coalesce_writes) is GuardedHttpToolsProtocol  # uvicorn's writes, bounded heads
    monkeypatch.delenv("GRIDPFN_COALESCE_WRITES")
    assert protocol_for(Settings().coalesce_writes) is CoalescingHttpToolsProtocol
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            http=protocol_for(settings.coalesce_writes),
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        x, y = scenarios
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/predict",
            timeout=30,
            json={"model": MODEL, "context": {"x": rows(x[:30]), "y": rows(y[:30])}, "queries": rows(x[40:42])},
        )
        assert answer.status_code == 200 and len(answer.json()["mean"]) == 2
        assert "server-timing" in answer.headers
    finally:
        server.should_exit = True
        thread.join(timeout=15)
