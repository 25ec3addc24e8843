"""A fork server that starts Python processes inside emulated hosts without re-importing torch.

Importing torch costs about a second per process, and a run starts nine at once on two cores.
The zygote imports torch, the harness and the transports once, then, for each request, forks a
child that joins the target host's network namespace (``setns`` on ``/proc/<pid>/ns/net`` of the
host's Mininet shell, exactly what ``mnexec -a`` does), starts its own session (so it can be
killed by process group), sends its output to a log file and calls a module's ``main(argv)``. The
child is a real process in the host: its sockets live in the host's namespace and cross the
emulated links.

Protocol (one JSON line each way over a Unix socket): the request ``{"netns_pid", "module",
"args", "log", "status"}`` is answered by ``{"pid"}``. The child writes its exit code to the
``status`` file as its last act; a child that leaves no status file died abnormally. A request may
carry one file descriptor (``SCM_RIGHTS``): the read end of the pipe holding the host's keys
(:mod:`harness.running.keys`). The child keeps it open and is told its number (``--keys-fd N``
after its arguments); the server closes its own copy once it has forked.

Run by the harness as ``python -m harness.hosts.zygote SOCKET``; :class:`Zygote` is the client.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

from harness.running import keys as handover
from topologies.testbed.ledger import ProcessRef
from topologies.testbed.process import HostProcess

CLONE_NEWNET = 0x40000000
READY_S = 60.0


class ZygoteError(RuntimeError):
    """The fork server could not start a process."""


def _preload() -> None:
    # Imported for their side effect: every child inherits them already loaded.
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import harness.hosts.bench  # noqa: F401
    import harness.hosts.node  # noqa: F401
    from harness.training import datasets
    from transports import registry

    for name in datasets.DATASETS:
        for split in ("train", "test"):
            with contextlib.suppress(datasets.DatasetError):
                datasets.load(name, split)

    try:
        infos = registry.entries()   # the built-in schemes and the $LTP_TRANSPORTS plugins
    except Exception:  # a bad plugin fails in the run that names it
        infos = list(registry.REGISTRY.values())
    for info in infos:
        with contextlib.suppress(Exception):  # a transport that cannot load fails in its run
            info.transport_class()


def _child(request: dict, listener: socket.socket, conn: socket.socket, fds: list[int]) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        listener.close()
        conn.close()
        args = list(request["args"]) + [arg for fd in fds[:1] for arg in (handover.FLAG, str(fd))]
        os.setsid()
        fd = os.open(f"/proc/{request['netns_pid']}/ns/net", os.O_RDONLY)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the host's network namespace failed")
        os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        sys.argv = [request["module"]] + args
        try:
            # The module is already imported (preloaded); run its entry point, main(argv).
            code = importlib.import_module(request["module"]).main(args) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
            Path(request["status"]).write_text(str(code))
        os._exit(code)


def serve(path: str) -> None:
    """Preload, then answer spawn requests on the Unix socket ``path`` until killed."""
    _preload()
    # Children are reaped automatically; their exit codes travel through status files.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            request, fds = _request(conn)
            pid = os.fork()
            if pid == 0:
                _child(request, listener, conn, fds)
            for fd in fds:
                os.close(fd)   # the child has it
            conn.sendall((json.dumps({"pid": pid}) + "\n").encode())


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request line and the descriptor that came with it (if any)."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, 1)
    while data and not data.endswith(b"\n"):
        more = conn.recv(65536)
        if not more:
            break
        data += more
    return json.loads(data), list(fds)


class Zygote:
    """Client and owner of one fork server; a context manager that stops it on exit."""

    def __init__(self, folder: Path, ledger) -> None:
        self.folder = folder
        self.ledger = ledger
        self.sock_path = folder / "zygote.sock"
        self.proc: subprocess.Popen | None = None
        self.ref: ProcessRef | None = None

    def __enter__(self) -> Zygote:
        self.folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.sock_path.unlink()
        log = open(self.folder / "zygote.log", "ab")
        with log:
            self.proc = subprocess.Popen([sys.executable, "-m", "harness.hosts.zygote", str(self.sock_path)],
                                         stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        self.ref = ProcessRef.of(self.proc.pid)
        self.ledger.add_process("groups", self.ref)
        # Ready when it says so (its imports take seconds); a dead zygote ends the wait at once.
        line = self.proc.stdout.readline().decode().strip()
        if line != "ready":
            self.close()
            raise ZygoteError(f"the fork server did not start; see {self.folder / 'zygote.log'}.")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server (children already started are the caller's to kill)."""
        if self.proc is not None:
            self.ref.kill_group()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            self.proc.stdout.close()
            self.ledger.remove_process("groups", self.ref)
            self.proc = None
        with contextlib.suppress(FileNotFoundError):
            self.sock_path.unlink()

    def spawn(self, host: str, netns_pid: int, module: str, args: list[str],
              log_path: Path, keys: bytes | None = None) -> HostProcess:
        """Start ``python -m module args`` inside the namespace of process ``netns_pid``; with
        ``keys`` (a host's handover), the child reads them from a pipe it inherits."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        status = log_path.with_suffix(".exit")
        request = {"netns_pid": netns_pid, "module": module, "args": args,
                   "log": str(log_path), "status": str(status)}
        line = (json.dumps(request) + "\n").encode()
        deadline = time.monotonic() + READY_S
        fds = [handover.pipe_fd(keys)] if keys is not None else []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    s.connect(str(self.sock_path))
                    sent = socket.send_fds(s, [line], fds) if fds else 0
                    if sent < len(line):   # (nothing left: the server may have answered already)
                        s.sendall(line[sent:])
                    reply = json.loads(s.makefile().readline())
                except (OSError, ValueError) as exc:
                    raise ZygoteError(f"the fork server did not answer ({exc}).") from exc
        finally:
            for fd in fds:
                os.close(fd)
        return HostProcess(host, log_path, self.ledger, pid=reply["pid"], status_path=status)


if __name__ == "__main__":
    serve(sys.argv[1])
