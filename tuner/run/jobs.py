"""`tune --jobs N`: N-1 workers beside the tune process, on the same study.

On a journal-file study (the default) each worker is a fork of the tune process: it starts with
every module imported, where a fresh `tuner worker` interpreter spent about a second of a core on
imports (benchmarks/jobs_speed.py), and opens its own storage. On a database storage each worker
is a `tuner worker` subprocess, because a forked child would inherit the parent's connections.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

__all__ = ["LocalWorkers"]

# A worker asked to stop (SIGINT) gets this long to hand its trial back before SIGKILL.
STOP_GRACE_S = 15.0


class _Worker(Protocol):
    pid: int

    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


class _Forked:
    """A forked worker process with the part of subprocess.Popen's interface used here."""

    def __init__(self, storage_url: str, study_name: str, log: Path) -> None:
        context = multiprocessing.get_context("fork")
        self.proc = context.Process(
            target=_work_in_fork,
            args=(storage_url, study_name, log),
            name=f"tuner-worker-{log.stem}",
            daemon=False,
        )
        # The child's garbage collector then never walks (and so copies) the inherited objects.
        gc.freeze()
        try:
            self.proc.start()
        finally:
            gc.unfreeze()
        self.pid = int(self.proc.pid or 0)

    def poll(self) -> int | None:
        """Exit code, or None while it runs."""
        return self.proc.exitcode

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the worker if it still runs."""
        if self.proc.exitcode is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code (subprocess.TimeoutExpired after `timeout` seconds)."""
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return self.proc.exitcode

    def kill(self) -> None:
        """SIGKILL the worker."""
        self.proc.kill()


def _work_in_fork(storage_url: str, study_name: str, log: Path) -> None:
    """The forked worker: `tuner worker --until-done`, its lines in `log`."""
    out = log.open("w", buffering=1)
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = out
    # Never touch the parent's stream objects: a thread of the parent (the progress display) may
    # have held their locks when it forked.
    for handler in logging.getLogger("optuna").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.stream = out
    from tuner.errors import TunerError
    from tuner.run.worker import work  # imports tuner.run.tune, which imports this module

    def trial_line(_study: Any, trial: Any) -> None:
        print(f"trial {trial.number} {trial.state.name.lower()}")

    try:
        outcome = work(storage_url, study_name, callbacks=[trial_line])
    except TunerError as exc:
        print(f"error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("error: interrupted")
        sys.exit(130)
    print(outcome.summary())


class LocalWorkers:
    """Start `count` worker processes; on leaving, wait for them (or stop them on an error)."""

    def __init__(self, storage_url: str, study_name: str, count: int, log_dir: Path) -> None:
        self.storage_url, self.study_name = storage_url, study_name
        worker = ["worker", "--storage", storage_url, "--study", study_name, "--until-done"]
        self.command = [sys.executable, "-m", "tuner", *worker]
        self.count, self.log_dir = count, log_dir
        self.procs: list[tuple[_Worker, Path]] = []
        self.errors: list[str] = []

    def _start(self, log: Path) -> _Worker:
        if self.storage_url.startswith("journal:"):
            return _Forked(self.storage_url, self.study_name, log)
        with log.open("wb") as fh:
            return subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT
            )

    def __enter__(self) -> LocalWorkers:
        if self.count <= 0:
            return self
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(1, self.count + 1):
            log = self.log_dir / f"worker-{i}.log"
            self.procs.append((self._start(log), log))
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
