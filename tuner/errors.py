"""Typed errors; the CLI turns each into one line and an exit code."""

from __future__ import annotations

__all__ = ["InputError", "NoFeasibleConfigError", "TunerError", "BackendError"]


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
