"""Typed errors; the CLI turns each into one line and an exit code."""

from __future__ import annotations

import errno
import reprlib
import unicodedata

__all__ = [
    "BackendError",
    "InputError",
    "InterruptedRunError",
    "NoFeasibleConfigError",
    "BACKEND_FAILED",
    "TunerError",
    "control_reason",
    "environment_error",
    "echo",
    "one_line",
    "printable",
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


# Metrics.extra key a backend sets when the variant failed because the backend itself could not
# run (no server started, no weights): a search where every variant says so exits 4, not 3.
BACKEND_FAILED = "backend_failed"

# An OSError whose errno says the path given has the wrong shape is the user's to fix (exit 2);
# any other (no permission, read-only or full disk, too many files) is the environment's (exit 4).
_PATH_ERRNOS = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP}
)
_ERRNO_WORDS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENOTDIR: "a file is where a folder is expected",
    errno.EISDIR: "a folder is where a file is expected",
}


def environment_error(exc: BaseException) -> tuple[str, int] | None:
    """(one line naming the path, exit code) for an OSError or a storage error in `exc`'s chain
    (what the user or the machine must fix, never a bug); None for anything else."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno is not None:
            words = _ERRNO_WORDS.get(cur.errno) or cur.strerror or type(cur).__name__
            paths = [str(p) for p in (cur.filename, cur.filename2) if p is not None]
            where = " -> ".join(paths) if paths else "a file or folder"
            code = InputError.exit_code if cur.errno in _PATH_ERRNOS else BackendError.exit_code
            return f"{where}: {words}", code
        # SQLite and SQLAlchemy say a full disk or a read-only database this way (no errno).
        if type(cur).__name__ == "OperationalError":
            return f"the study storage failed: {one_line(str(cur), MAX_ECHO_CHARS * 2)}", (
                BackendError.exit_code
            )
        cur = cur.__cause__ or cur.__context__
    return None


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
    """`text` on one line (whitespace runs collapsed, controls escaped), cut to `limit`."""
    flat = printable(" ".join(text[: limit * 4].split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# What a terminal, a YAML line or a shell line may act on instead of showing: C0/C1 controls
# (ESC starts terminal escape sequences; CR and NEL end a YAML comment), format characters
# (bidi overrides reorder what is shown), lone surrogates and the line/paragraph separators.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _control(text: str) -> str | None:
    if text.isprintable():  # none of those categories is printable: the common case, fast
        return None
    return next((c for c in text if unicodedata.category(c) in _CONTROL_CATEGORIES), None)


def printable(text: str, keep: str = "") -> str:
    """`text` with each control character but those in `keep` written as its escape (`\\x1b`):
    text from a server or a file is shown, never acted on by the terminal."""
    if _control(text) is None:
        return text
    return "".join(
        c.encode("unicode_escape").decode("ascii")
        if c not in keep and unicodedata.category(c) in _CONTROL_CATEGORIES
        else c
        for c in text
    )


def control_reason(text: str) -> str | None:
    """Why `text` cannot be a name or id (its first control character), or None when it can."""
    char = _control(text)
    if char is None:
        return None
    # A name is written into launch files: a newline in a YAML comment or a script starts a
    # line of the attacker's choosing (`trust-remote-code: true`).
    return (
        f"contains the control character U+{ord(char):04X}; a name or id takes printable "
        "characters only (no newline, tab, escape or format character)"
    )
