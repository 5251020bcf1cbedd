"""`tune --jobs N`: N-1 `tuner worker` processes beside the tune process, on the same study."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType

__all__ = ["LocalWorkers"]

# A worker asked to stop (SIGINT) gets this long to hand its trial back before SIGKILL.
STOP_GRACE_S = 15.0


class LocalWorkers:
    """Start `count` worker processes; on leaving, wait for them (or stop them on an error)."""

    def __init__(self, storage_url: str, study_name: str, count: int, log_dir: Path) -> None:
        self.command = [sys.executable, "-m", "tuner", "worker", "--storage", storage_url,
                        "--study", study_name, "--until-done"]  # fmt: skip
        self.count, self.log_dir = count, log_dir
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.errors: list[str] = []

    def __enter__(self) -> LocalWorkers:
        if self.count <= 0:
            return self
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(1, self.count + 1):
            log = self.log_dir / f"worker-{i}.log"
            with log.open("wb") as fh:
                proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=fh,
                                        stderr=subprocess.STDOUT)  # fmt: skip
            self.procs.append((proc, log))
        return self

    def pids(self) -> list[int]:
        """Process ids of the workers started."""
        return [p.pid for p, _ in self.procs]

    def _stop(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # the worker fails and re-queues its trial
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._stop()
            return
        for i, (proc, log) in enumerate(self.procs, start=1):
            code = proc.wait()
            if code != 0:
                self.errors.append(f"worker {i} exited with code {code} (log: {log})")
