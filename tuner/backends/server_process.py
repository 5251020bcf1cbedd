"""A serving engine as a child process: own process group, log file, readiness, clean stop.

Used by the real-engine backends (vLLM) and by tests; knows nothing about any one engine
beyond the argument list, environment and health URL it is given.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

__all__ = ["ServerFailed", "ServerProcess", "error_line", "free_port", "group_pids"]

_HEALTH_POLL_S = 1.0
_HEALTH_REQUEST_TIMEOUT_S = 5.0
_LOG_TAIL_LINES = 25
_REAP_WAIT_S = 10.0

# Lines that name a failure. Generic wrappers ("... failed. See root cause above.") are skipped
# in favour of the root cause printed before them.
_ERROR_LINE = re.compile(
    r"((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit)\b:\s*\S.*|\S+\.py: error: .*)"
)
_GENERIC = re.compile(r"root cause above|initialization failed|^\S*(Error|Exception):\s*$")
# Log records below ERROR (vLLM: "(APIServer pid=1) WARNING 12-02 16:28:01 [file.py:255] ...")
# may quote an exception name in advice; they never carry the failure.
_NOT_AN_ERROR = re.compile(r"\b(DEBUG|INFO|WARNING)\s+\d\d-\d\d \d\d:\d\d:\d\d\b")


# A server that logs without end (a warning per request) is read from its end only.
MAX_LOG_READ_BYTES = 4 * 1024 * 1024


class ServerFailed(Exception):
    """The server died or never became ready; the message is the reason with its error line."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free on `host` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`, from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the parenthesised command: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return sorted(pids)


def error_line(log_text: str) -> str | None:
    """The most specific error line of a log: the last root-cause-looking error, else None."""
    found = []
    for line in log_text.splitlines():
        if _NOT_AN_ERROR.search(line):
            continue
        m = _ERROR_LINE.search(line)
        if m:
            found.append(m.group(1).strip())
    specific = [line for line in found if not _GENERIC.search(line)]
    if specific:
        return specific[-1]
    return found[-1] if found else None


class ServerProcess:
    """One engine server: started in its own session, logging to a file, stopped with its group."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str], log_path: Path):
        self.args = list(args)
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = False  # it answered its health check once: later failures are the variant's

    @property
    def pid(self) -> int | None:
        """PID of the server (also its process-group id)."""
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Launch the server (argument list, no shell) in a new session, output to the log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exit_code(self) -> int | None:
        """The server's exit status, or None while it runs."""
        return self.proc.poll() if self.proc else None

    def exit_text(self) -> str:
        """'exit code N', naming the signal when a signal ended the server."""
        code = self.exit_code()
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"exit code {code}, {signal.Signals(-code).name}"
        return f"exit code {code}"

    def log_text(self) -> str:
        """What the server has logged so far (its last MAX_LOG_READ_BYTES: the error is late)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - MAX_LOG_READ_BYTES))
                return log.read(MAX_LOG_READ_BYTES).decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    def failure(self, what: str) -> ServerFailed:
        """A ServerFailed naming `what` happened and the server's own error line."""
        line = error_line(self.log_text())
        return ServerFailed(f"{what}: {line}" if line else what)

    def wait_ready(self, health_url: str, timeout_s: float) -> float:
        """Poll `health_url` until HTTP 200; seconds waited. ServerFailed on death or timeout."""
        start = time.monotonic()
        with httpx.Client(timeout=_HEALTH_REQUEST_TIMEOUT_S) as http:
            while True:
                if self.exit_code() is not None:
                    raise self.failure(f"server exited during startup ({self.exit_text()})")
                try:
                    if http.get(health_url).status_code == 200:
                        self.ready = True
                        return time.monotonic() - start
                except httpx.HTTPError:
                    pass
                if time.monotonic() - start > timeout_s:
                    raise self.failure(f"server not ready after {timeout_s:g} s")
                time.sleep(_HEALTH_POLL_S)

    def stop(self, grace_s: float = 20.0) -> list[int]:
        """SIGTERM the group, SIGKILL after `grace_s`; PIDs still alive then (empty = clean)."""
        if self.proc is None:
            return []
        pgid = self.proc.pid
        self._signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while group_pids(pgid) and time.monotonic() < deadline:
            self.proc.poll()  # reap the leader so it does not linger as a zombie
            time.sleep(0.2)
        if group_pids(pgid):
            self._signal_group(pgid, signal.SIGKILL)
            deadline = time.monotonic() + _REAP_WAIT_S
            while group_pids(pgid) and time.monotonic() < deadline:
                self.proc.poll()
                time.sleep(0.2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=_REAP_WAIT_S)
        return group_pids(pgid)

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
