"""The upload sandbox: what a reader process cannot do, and how its limits and failures reach the client."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandapower as pp
import pytest

from gridsim.network import pandapower_net
from service.engine.errors import InvalidInput, QueueFull, TooLarge
from service.engine.upload_sandbox import SandboxLimits, UploadSandbox

REPO = Path(__file__).resolve().parents[3]


def _confined(snippet: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `snippet` in a fresh interpreter after `confine` (what every upload reader does first); the
    modules it uses are imported before, as the zygote imports everything before it forks a reader."""
    code = textwrap.dedent(f"""
        import os, signal, socket, subprocess, sys
        from service.engine.sandbox_zygote import SandboxLimits, confine
        confine(SandboxLimits(memory_bytes=256 * 2**20, cpu_s=5))
        {textwrap.indent(textwrap.dedent(snippet), "        ").strip()}
    """)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_confined_reader_cannot_run_commands(tmp_path):
    done = _confined(
        f"""
        try:
            subprocess.run(["touch", "{tmp_path}/ran"])
        except OSError as exc:
            print("refused", type(exc).__name__)
        print("system", os.system("touch {tmp_path}/ran2"))
    """,
        tmp_path,
    )
    assert "refused" in done.stdout and not (tmp_path / "ran").exists() and not (tmp_path / "ran2").exists(), done


def test_a_confined_reader_cannot_write_files(tmp_path):
    done = _confined(
        f"""
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # else the kernel kills it outright: also a refusal
        try:
            with open("/tmp/gridpfn-sandbox-probe-{os.getpid()}", "w") as out:
                out.write("x" * 10)
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno)
    """,
        tmp_path,
    )
    assert "refused" in done.stdout and "wrote" not in done.stdout, done


def test_a_confined_reader_has_bounded_memory_and_no_root(tmp_path):
    done = _confined(
        """
        try:
            block = bytearray(600 * 2**20)
            print("allocated")
        except MemoryError:
            print("refused")
        print("uid", os.getuid())
    """,
        tmp_path,
    )
    assert "refused" in done.stdout and "allocated" not in done.stdout, done
    if os.geteuid() == 0:
        assert "uid 65534" in done.stdout, done


def test_a_confined_reader_cannot_open_sockets_or_exec(tmp_path):
    """The seccomp filter: a reader that could reach the host's Redis or exec a shell gets EPERM instead."""
    done = _confined(
        """
        for name, attempt in (("socket", lambda: socket.socket()), ("pair", socket.socketpair),
                              ("exec", lambda: os.execv("/bin/true", ["true"]))):
            try:
                attempt()
                print(name, "allowed")
            except PermissionError:
                print(name, "refused")
    """,
        tmp_path,
    )
    assert done.stdout.split() == ["socket", "refused", "pair", "refused", "exec", "refused"], done


def test_the_filter_program_denies_what_it_lists():
    """Decode the BPF program: the x86-64 numbers it denies are exactly the listed calls, then allow, then EPERM."""
    import struct

    from service.engine import syscall_filter

    arch, calls = syscall_filter.ARCHES["x86_64"]
    code = syscall_filter._program(arch, sorted(calls.values()))
    ops = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    denied = [k for c, _, _, k in ops if c == syscall_filter._JEQ_K][1:]  # the first compares the arch
    assert denied == sorted(calls.values()) and ops[1][3] == arch
    assert ops[-2][3] == syscall_filter._RET_ALLOW and ops[-1][3] & 0xFFFF0000 == syscall_filter._RET_ERRNO


@pytest.fixture
def feeder_json() -> bytes:
    return pp.to_json(pandapower_net("kerber_landnetz_kabel_1")).encode()


@pytest.fixture(scope="module")
def runner():
    """One event loop for the module, so that a sandbox (its zygote) can serve more than one test."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="module")
def default_sandbox(runner):
    """The default limits, one upload read at a time: a zygote takes seconds of imports to start (tens on a busy
    2-core host), so the crash test's restarted one serves the queue test too."""
    sandbox = UploadSandbox(SandboxLimits(), concurrency=1)
    yield sandbox
    runner.run(sandbox.close())


def test_a_benign_upload_reads_as_in_process_and_the_zygote_survives_a_crash(runner, default_sandbox, feeder_json):
    from service.engine.networks import snapshot_upload

    async def run():
        sandbox = default_sandbox
        # the zygote starts on this first use; the in-process reading meanwhile, in a thread
        (info, source), (expected, _) = await asyncio.gather(
            sandbox.snapshot(feeder_json, None), asyncio.to_thread(snapshot_upload, feeder_json, None)
        )
        assert info["id"] == expected["id"] and source.startswith("{")
        sandbox._zygote.kill()  # the zygote dies (say, the OOM killer): the next upload starts a new one
        await sandbox._zygote.wait()
        again, _ = await sandbox.snapshot(feeder_json, "feeder.json")
        assert again["id"] == expected["id"]

    runner.run(run())


def test_limits_become_client_errors(feeder_json):
    async def run():
        slow = UploadSandbox(SandboxLimits(wall_s=0.001))
        # no room to grow beyond the zygote's own free heap (tens of MB), and a case whose ~1.9M numbers need more
        tight = UploadSandbox(SandboxLimits(memory_bytes=1))
        try:
            await asyncio.gather(slow.start(), tight.start())  # both zygotes' imports at once: seconds each
            with pytest.raises(InvalidInput, match="longer than 0.001 s") as info:
                await slow.snapshot(feeder_json, None)
            assert "GRIDPFN_UPLOAD_TIMEOUT_S" in info.value.entries[0]["expected"]
            small = UploadSandbox(SandboxLimits(max_bytes=1024))
            with pytest.raises(TooLarge, match="over the limit"):
                await small.snapshot(feeder_json, None)
            big_case = b"mpc.bus = [" + (b"2 1 0.1 0.05 0 0 1 1 0 10 1 1.1 0.9" + b" 0" * 87 + b";\n") * 19_000 + b"];"
            with pytest.raises(TooLarge, match="MiB an upload may use") as refused:
                await tight.snapshot(big_case, "big.m")
            entry = refused.value.entries[0]  # the setting named, no exception names or allocation sizes
            assert entry["field"] == "body" and "GRIDPFN_UPLOAD_MEMORY_MB" in entry["expected"]
            assert "Error" not in entry["message"] and "allocate" not in entry["message"]
        finally:
            await asyncio.gather(slow.close(), tight.close())

    asyncio.run(run())


def test_uploads_beyond_the_queue_are_refused_at_once(runner, default_sandbox, feeder_json):
    """One upload is read at a time and `concurrency` more wait; one more is refused (503) without waiting."""

    async def run():
        sandbox = default_sandbox  # concurrency=1
        await sandbox.start()  # (already running when the crash test ran first)
        reading = asyncio.create_task(sandbox.snapshot(feeder_json, None))
        waiting = asyncio.create_task(sandbox.snapshot(feeder_json, None))
        await asyncio.sleep(0)  # both admitted: one read, one queued
        with pytest.raises(QueueFull):
            await sandbox.snapshot(feeder_json, None)
        assert (await reading)[0]["n_buses"] == 18 and (await waiting)[0]["n_buses"] == 18
        assert sandbox.pending == 0

    runner.run(run())
