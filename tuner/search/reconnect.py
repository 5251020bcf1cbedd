"""A study database that drops for seconds (a restart, a failover) is waited for, not fatal.

Every new connection of a database storage goes through `Reconnect`: a connection that fails
for a reason that passes (refused, timed out, the server starting or shutting down) is tried
again with exponential backoff for at most RECONNECT_TOTAL_S, then the command stops with one
BackendError line (exit 4) naming the database, its password masked. A reason that does not pass
(a wrong password, a missing database) fails at once, as before. With `pool_pre_ping` a pooled
connection the drop killed is noticed before use, so the next query reconnects through here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tuner.errors import BackendError

__all__ = [
    "RECONNECT_FIRST_WAIT_S",
    "RECONNECT_TOTAL_S",
    "Reconnect",
    "is_transient",
]

# The first wait after a failed connection; each next one doubles (0.5, 1, 2, 4, 8 s...).
RECONNECT_FIRST_WAIT_S = 0.5
# The most a command waits for its database to come back before it gives up: a PostgreSQL
# restart takes a few seconds, a managed failover 10-20 s.
RECONNECT_TOTAL_S = 20.0
# Words of a connection error that waiting will not fix: the URL or the server's setup is wrong.
_LASTING = (
    "authentication",
    "password",
    "does not exist",
    "pg_hba.conf",
    "permission denied",
    "could not translate host name",
    "name or service not known",
    "invalid dsn",
    "invalid connection option",
)


def is_transient(exc: BaseException) -> bool:
    """Whether a failed connection may succeed if tried again soon (the server is away)."""
    text = str(exc).lower()
    return not any(word in text for word in _LASTING)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Reconnect:
    """SQLAlchemy's `do_connect` hook for one engine: new connections retried with backoff.

    Once it has given up, later connections of this engine are tried once: a run that is
    stopping (failing its trial, counting what it kept) does not wait the whole time again.
    """

    def __init__(self, where: str) -> None:
        self.where = where  # the URL, password masked
        self.gave_up = False

    def __call__(self, dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        """Open a DBAPI connection, retrying failures that pass."""
        return self.connect(lambda: dialect.connect(*cargs, **cparams))

    def connect(self, open_one: Callable[[], Any]) -> Any:
        """`open_one()`, tried again while it fails transiently, within RECONNECT_TOTAL_S."""
        started, wait, attempts = time.monotonic(), RECONNECT_FIRST_WAIT_S, 0
        while True:
            attempts += 1
            try:
                connection = open_one()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                spent = time.monotonic() - started
                if self.gave_up or spent >= RECONNECT_TOTAL_S:
                    self.gave_up = True
                    raise BackendError(
                        f"the study database {self.where} is unreachable ({attempts} "
                        f"attempt(s) over {spent:.0f} s: {_first_line(exc)}); check that the "
                        "server runs, then run the command again (finished trials are kept)"
                    ) from None
                time.sleep(min(wait, RECONNECT_TOTAL_S - spent))
                wait *= 2
            else:
                self.gave_up = False
                return connection
