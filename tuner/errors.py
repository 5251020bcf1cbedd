"""Typed errors; the CLI turns each into one line and an exit code."""

from __future__ import annotations

import reprlib

__all__ = [
    "BackendError",
    "InputError",
    "InterruptedRunError",
    "NoFeasibleConfigError",
    "TunerError",
    "echo",
    "one_line",
]


class TunerError(Exception):
    """Base of every error tuner reports to a user; `exit_code` is what the CLI returns."""

    exit_code = 1


class InputError(TunerError):
    """Bad user input: unknown name, malformed file, wrong type or out-of-range value."""

    exit_code = 2


class NoFeasibleConfigError(TunerError):
    """No evaluated variant met the SLA and memory constraints."""

    exit_code = 3


class BackendError(TunerError):
    """A backend could not run at all (server unreachable, missing dependency)."""

    exit_code = 4


class InterruptedRunError(TunerError):
    """Ctrl-C stopped a run; the message says what was kept and what to run next."""

    exit_code = 130


# Longest echo of a user value, and of a whole error line, before it is cut: an error names the
# problem, it does not replay the input (a YAML alias bomb expands to hundreds of megabytes).
MAX_ECHO_CHARS = 80
MAX_LINE_CHARS = 1500


def _echo_repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxlevel, r.maxdict, r.maxlist, r.maxtuple, r.maxset = 3, 4, 4, 4, 4
    r.maxstring, r.maxother, r.maxlong = MAX_ECHO_CHARS, MAX_ECHO_CHARS, MAX_ECHO_CHARS
    return r


_ECHO = _echo_repr()


def echo(value: object) -> str:
    """repr() of a user value, bounded in depth, items and length (never expands the whole)."""
    return one_line(_ECHO.repr(value), MAX_ECHO_CHARS)


def one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters."""
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
