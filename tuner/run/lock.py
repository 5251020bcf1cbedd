"""One process at a time per run folder: a second `tune --resume` on a busy folder is refused."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tuner.errors import InputError
from tuner.run.folder import make_run_dir

__all__ = ["LOCK_FILE", "run_folder_lock"]

LOCK_FILE = ".tuner.lock"


@contextmanager
def run_folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run folder for this process; the kernel releases it if the process dies."""
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"run folder {run_dir} is a file; name a folder")
    make_run_dir(run_dir)
    with (run_dir / LOCK_FILE).open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise InputError(
                f"run folder {run_dir} is in use by another tuner process (pid {holder}); "
                "wait for it to finish or stop it"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
