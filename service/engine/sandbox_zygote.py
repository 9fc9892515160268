"""The upload sandbox's process: a warmed-up zygote that forks one confined reader per upload.

Started by service.engine.upload_sandbox as `python -m service.engine.sandbox_zygote <limits>`. It
imports pandapower, torch and the readers once and runs them on a tiny case (every lazy import
done while files may still be opened), then serves requests one at a time over its stdin/stdout:
each request is forked off, so a reader starts in milliseconds instead of the seconds of a fresh
interpreter, and no two uploads ever share a process.

The forked reader confines itself before it looks at the upload: no new privileges, `nobody` when
root, die with the zygote, and resource caps (address space, CPU seconds, file size 0: it cannot
write files; processes 0: it cannot fork or run commands; few open files) and a seccomp filter
(no sockets, no exec, no tracing). The zygote only runs
trusted code on the upload's bytes: it frames them, forks, and waits for the reply with a
deadline, killing the reader past it. Replies are JSON, never pickle, so even a subverted reader
cannot make the server run code by what it answers.

Frames: 4-byte little-endian length + payload. Request: a JSON header (`{"filename"}`), then the
upload. Reply: JSON, `{"ok": true, "info", "source"}` or `{"ok": false, "status", "field",
"problem", "expected"}`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import select
import signal
import struct
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO

import orjson

from service.engine import syscall_filter

log = logging.getLogger("gridpfn.upload_sandbox")

NOBODY_UID = 65534
REPLY_CAP = 64 * 1024 * 1024  # a reply (a description and the normalised JSON) is far below this
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38


@dataclass(frozen=True)
class SandboxLimits:
    """What one upload may use (settings: GRIDPFN_UPLOAD_*, GRIDPFN_MAX_NETWORK_BYTES)."""

    memory_bytes: int = 1024 * 1024 * 1024
    cpu_s: int = 10
    wall_s: float = 30.0
    max_bytes: int = 8 * 1024 * 1024

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()


def read_frame(stream: BinaryIO, cap: int) -> bytes | None:
    """One frame's payload; None at end of stream."""
    size = stream.read(4)
    if len(size) < 4:
        return None
    length = struct.unpack("<I", size)[0]
    if length > cap:
        raise ValueError(f"frame of {length} bytes is over {cap}")
    payload = stream.read(length)
    return payload if len(payload) == length else None


def frame(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload


def refusal(status: int, field: str, problem: str, expected: str | None) -> dict[str, Any]:
    return {"ok": False, "status": status, "field": field, "problem": problem, "expected": expected}


_WARM_UP = b"""mpc.version = '2';
mpc.baseMVA = 10;
mpc.bus = [1 3 0 0 0 0 1 1 0 12.66 1 1.1 0.9; 2 1 0.1 0.05 0 0 1 1 0 12.66 1 1.1 0.9];
mpc.gen = [1 0 0 10 -10 1 100 1 10 0];
mpc.branch = [1 2 0.01 0.01 0 0 0 0 0 0 1 -360 360];
"""


def _warm_up() -> None:
    import pandapower as pp

    from gridsim.network import pandapower_net
    from service.engine.networks import snapshot_upload

    info, _ = snapshot_upload(_WARM_UP, "warm-up.m")
    snapshot_upload(pp.to_json(pandapower_net("ieee33")).encode(), "warm-up.json")
    if info["n_buses"] != 2:
        raise RuntimeError("upload sandbox: the warm-up case did not read back")


def _vm_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def confine(limits: SandboxLimits) -> None:
    """Drop to nobody (when root), no new privileges, die with the zygote, the resource caps, then no sockets,
    exec or tracing (service.engine.syscall_filter)."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY_UID)
        os.setuid(NOBODY_UID)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a change of user clears it: set after
    cpu = int(time.process_time()) + 1 + limits.cpu_s
    caps = {
        resource.RLIMIT_AS: (_vm_size() + limits.memory_bytes,) * 2,
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_FSIZE: (0, 0),
        resource.RLIMIT_NPROC: (0, 0),
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_NOFILE: (64, 64),
    }
    for which, value in caps.items():
        resource.setrlimit(which, value)
    if not syscall_filter.install():
        log.warning("upload reader: no system-call filter for %s", os.uname().machine)


def read_upload(data: bytes, filename: str | None, limits: SandboxLimits) -> dict[str, Any]:
    """The reader's work, already confined: the snapshot, or the refusal it raised, as a reply."""
    from gridsim.errors import NetworkError
    from service.engine.errors import EngineError
    from service.engine.networks import snapshot_upload

    try:
        info, source = snapshot_upload(data, filename)
        return {"ok": True, "info": info, "source": source}
    except NetworkError as exc:
        return refusal(422, exc.field, exc.problem, exc.expected)
    except EngineError as exc:
        entry = exc.entries[0] if exc.entries else {}
        return refusal(422, entry.get("field") or "body", entry.get("message") or exc.detail, entry.get("expected"))
    except MemoryError:
        return too_big(limits)
    except RecursionError:
        return refusal(
            422,
            "body",
            "the network is nested too deeply to be read",
            "pandapower JSON (pandapower.to_json) or a MATPOWER case of a radial feeder",
        )
    except Exception:  # a reader or pandapower choked on this file: the file's problem, logged in full and
        log.exception("upload could not be read")  # answered in words (exception names mean nothing to the uploader)
        return refusal(
            422,
            "body",
            "cannot be read as a feeder: a value or table the readers and pandapower cannot handle",
            "pandapower JSON (pandapower.to_json) or a MATPOWER case of a radial feeder, with a real feeder's values",
        )


def too_big(limits: SandboxLimits) -> dict[str, Any]:
    """The refusal of an upload whose reading ran out of the memory an upload may use: a 413 naming the setting."""
    return refusal(
        413,
        "body",
        f"reading the network needs more than the {limits.memory_bytes // 2**20} MiB an upload may use",
        "a smaller or simpler network (the limit is GRIDPFN_UPLOAD_MEMORY_MB)",
    )


def _fork_reader(data: bytes, filename: str | None, limits: SandboxLimits) -> dict[str, Any]:
    """Fork a confined reader for one upload and collect its reply within the wall-clock limit."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reader
        code = 0
        try:
            os.close(read_end)
            os.close(0)
            os.close(1)
            confine(limits)
            encoded = orjson.dumps(read_upload(data, filename, limits))
            view = memoryview(encoded)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, size, deadline, timed_out = [], 0, time.monotonic() + limits.wall_s, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([read_end], [], [], left)
            if not ready:
                continue
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > REPLY_CAP:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if timed_out or size > REPLY_CAP:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return refusal(
            422,
            "body",
            f"reading the network took longer than {limits.wall_s:g} s and was stopped",
            "a network that reads and solves within the limit (GRIDPFN_UPLOAD_TIMEOUT_S)",
        )
    try:
        reply = orjson.loads(b"".join(chunks)) if size <= REPLY_CAP else None
    except orjson.JSONDecodeError:
        reply = None
    if isinstance(reply, dict) and isinstance(reply.get("ok"), bool):
        return reply
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        return refusal(
            422,
            "body",
            f"reading the network used more than {limits.cpu_s} s of CPU and was stopped",
            "a network that reads and solves within the limit (GRIDPFN_UPLOAD_CPU_S)",
        )
    log.warning("upload reader stopped without an answer (wait status %d)", status)
    return refusal(
        413,
        "body",
        "reading the network stopped without an answer; it may need more "
        f"than the {limits.memory_bytes // 2**20} MiB an upload may use",
        "a smaller or simpler network (the limit is GRIDPFN_UPLOAD_MEMORY_MB)",
    )


def serve(limits: SandboxLimits) -> int:
    """The zygote's loop: one request at a time, until the server closes the pipe."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the server
    import torch

    torch.set_num_threads(1)
    _warm_up()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(frame(b'{"ready": true}'))
    stdout.flush()
    while True:
        header = read_frame(stdin, 4096)
        data = None if header is None else read_frame(stdin, limits.max_bytes)
        if data is None:
            return 0
        assert header is not None  # data is None whenever header is
        filename = orjson.loads(header).get("filename")
        reply = _fork_reader(data, filename if isinstance(filename, str) else None, limits)
        stdout.write(frame(orjson.dumps(reply)))
        stdout.flush()


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore", category=FutureWarning)  # pandas/pandapower deprecations, once per upload
    warnings.simplefilter("ignore", category=DeprecationWarning)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    sys.exit(serve(SandboxLimits(**orjson.loads(sys.argv[1]))))
