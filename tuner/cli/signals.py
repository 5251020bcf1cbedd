"""Stop signals end a command the way Ctrl-C does, and Ctrl-C while the CLI starts is one line.

`kill PID`, a job scheduler's stop and a closed terminal send SIGTERM or SIGHUP, whose default
action ends the process at once: a tune then leaves no report and a trial RUNNING. Raised as
KeyboardInterrupt in the main thread instead, they take Ctrl-C's path (the tune keeps its finished
trials, writes its folder and says how to resume; exit 130).

Kept free of heavy imports: it guards the second or so in which the commands import.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["INTERRUPT_EXIT", "STOP_SIGNALS", "interrupt_on_stop_signals", "quiet_interrupt"]

# The exit code of an interrupted command (tuner.errors.InterruptedRunError's), as shells use.
INTERRUPT_EXIT = 130
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def interrupt_on_stop_signals() -> Iterator[None]:
    """Within the block SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread; a signal
    this process was told to ignore (`nohup` ignores SIGHUP) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (a command run from a test's thread)
        return
    previous = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def quiet_interrupt() -> Iterator[None]:
    """Ctrl-C within the block (the CLI's imports) exits 130 with one line, not a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.stdout.flush()
        sys.stderr.flush()
        # A SystemExit raised while an interrupted import unwinds can still end the process as
        # an unhandled KeyboardInterrupt (status -SIGINT, not 130); nothing has been computed
        # this early (a running command saves its work in its own handler), so exit at once.
        os._exit(INTERRUPT_EXIT)
