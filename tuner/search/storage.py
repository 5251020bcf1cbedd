"""Optuna storages from a URL, failing fast on bad input; a lock that serialises one study.

Shared studies live in an RDB (PostgreSQL for many hosts, SQLite for one) or a journal file.
RDB storages record a heartbeat per running trial, so a worker that died on another host is told
from a live one once its heartbeat is older than the grace period (`tuner.search.parallel` then
fails the trial and queues its variant once more).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

from tuner.errors import BackendError, InputError
from tuner.search.reconnect import Reconnect

__all__ = [
    "GRACE_S",
    "HEARTBEAT_INTERVAL_S",
    "STORAGE_HELP",
    "drop_torn_tail",
    "make_storage",
    "public_url",
    "rdb_of",
    "study_lock",
]

# A running trial records a heartbeat this often; one silent for GRACE_S is taken for dead.
# Six missed beats: a loaded database or a long GC pause is not mistaken for a dead worker.
HEARTBEAT_INTERVAL_S = 10
GRACE_S = 60
# A server that does not answer within this is reported, not waited for (libpq's option).
CONNECT_TIMEOUT_S = 10
# Several workers opening one new RDB study race to create its tables: the loser retries.
STORAGE_OPEN_ATTEMPTS = 5
STORAGE_RETRY_S = 0.5
# Bytes read at a time when looking back for a torn journal line's start.
_TAIL_CHUNK = 64 * 1024

STORAGE_HELP = (
    "allowed: postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB, sqlite:///PATH.db, journal:PATH"
)


def public_url(url: str) -> str:
    """The URL with any password masked, for messages and logs."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a SQLAlchemy URL: nothing to mask that we could find
        return url


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parse(url: str) -> Any:
    """The SQLAlchemy URL, with the driver defaulted to psycopg (v3) for plain postgresql://."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(f"--storage {url!r} is not a database URL; {STORAGE_HELP}") from None
    if parsed.drivername == "postgresql":
        # SQLAlchemy's default PostgreSQL driver is psycopg2; the `scale` extra installs psycopg.
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        parsed.get_dialect()
    except ImportError as exc:
        raise InputError(
            f"--storage {public_url(url)}: the database driver is not installed ({exc.name}); "
            "install it with: pip install 'tuner[scale]'"
        ) from None
    except Exception:  # sqlalchemy NoSuchModuleError: an unknown dialect
        raise InputError(
            f"--storage {public_url(url)}: unknown database kind {parsed.drivername!r}; "
            f"{STORAGE_HELP}"
        ) from None
    return parsed


def _engine_kwargs(parsed: Any) -> dict[str, Any]:
    if parsed.get_backend_name() == "sqlite":
        return {}
    # A pooled connection a server restart killed is found before use and replaced (through
    # Reconnect), instead of failing the query it was taken for.
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    return kwargs


def _wait_for_drops(engine: Any, parsed: Any) -> None:
    """Retry the engine's new connections while its server is away (tuner.search.reconnect)."""
    if engine.dialect.name != "sqlite":
        import sqlalchemy

        where = parsed.render_as_string(hide_password=True)
        sqlalchemy.event.listen(engine, "do_connect", Reconnect(where))


def _probe(parsed: Any, engine_kwargs: dict[str, Any]) -> None:
    """Connect once: an unreachable server, bad password or missing folder fails now, once."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(parsed, **engine_kwargs)
    _wait_for_drops(engine, parsed)
    try:
        with engine.connect():
            pass
    except BackendError:  # still unreachable after the retries: the environment's to fix
        raise
    except Exception as exc:
        where = parsed.render_as_string(hide_password=True)
        raise InputError(f"--storage {where}: cannot connect: {_first_line(exc)}") from None
    finally:
        engine.dispose()


def _journal(path: str) -> optuna.storages.BaseStorage:
    if not path or Path(path).is_dir() or not Path(path).parent.is_dir():
        raise InputError(f"--storage journal:{path}: needs a file path in an existing folder")
    return JournalStorage(UnsyncedJournal(path))


def drop_torn_tail(path: Path) -> int:
    """Cut a last line that lacks its newline (a write torn by a full disk or a kill) off the
    end of a line-per-record file; every complete record stays. Returns the bytes cut.

    Call it only while no other process may be appending (under the file's append lock).
    """
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        # Walk back to the last newline: the torn record is the bytes after it.
        end = size
        while end > 0:
            start = max(0, end - _TAIL_CHUNK)
            fh.seek(start)
            newline = fh.read(end - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        else:
            keep = 0
        fh.truncate(keep)
        return size - keep


class UnsyncedJournal(JournalFileBackend):
    """Optuna's journal file, appending without an fsync per log line, never onto a torn line.

    A trial writes about 19 log lines (params, attributes, constraints, state); Optuna fsyncs
    each, which cost 4 ms apiece here, 14 s of a 200-trial tune. A line that reached the kernel
    survives a killed process (not a power cut), the guarantee the SQLite storage gets from
    synchronous=NORMAL.

    Appends hold an flock on the journal, not Optuna's symlink lock: that lock's release is not
    safe against a KeyboardInterrupt landing inside it (Ctrl-C, or SIGTERM through
    tuner.cli.signals), and one a killed process leaves behind stalls every append for its 30 s
    grace period; the kernel drops an flock with its file, whatever ends the process.

    A full disk can still cut an append short. Optuna's reader skips a torn last line, but an
    append after it would glue the next record onto it, and from then on every read of the
    journal fails. So a failed append cuts what it wrote, and each append first cuts a torn
    tail an earlier process left (both keep every complete record).
    """

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append `logs` as JSON lines under an exclusive lock on the journal (no fsync)."""
        data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode()
        path = Path(self._file_path)
        with path.open("ab", buffering=0) as fh:  # unbuffered: nothing left to flush on close
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
            drop_torn_tail(path)
            size = os.fstat(fh.fileno()).st_size
            try:
                view = memoryview(data)
                while view:
                    written = fh.write(view)
                    if not written:  # a regular file takes at least a byte, or raises
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    view = view[written:]
            except OSError as exc:
                with contextlib.suppress(OSError):  # else the next append cuts the torn tail
                    os.truncate(path, size)
                raise BackendError(
                    f"{path}: cannot append to the study journal ({exc.strerror or exc}); the "
                    "finished trials are kept: free the space, then continue with --resume"
                ) from exc


def make_storage(url: str, *, grace_s: int = GRACE_S) -> optuna.storages.BaseStorage:
    """An Optuna storage from a URL: a SQLAlchemy RDB URL (with heartbeats) or `journal:PATH`."""
    if url.startswith("journal:"):
        return _journal(url.removeprefix("journal:"))
    parsed = _parse(url)
    engine_kwargs = _engine_kwargs(parsed)
    _probe(parsed, engine_kwargs)
    with warnings.catch_warnings():  # heartbeats are marked experimental since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _open_rdb(parsed, engine_kwargs, grace_s, url)


def _fast_sqlite(connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer, and with synchronous=NORMAL a commit survives
    # a killed process (not a power cut) without an fsync per trial attribute: both matter when
    # several local workers share one SQLite study (--storage sqlite:///PATH).
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _open_rdb(
    parsed: Any, engine_kwargs: dict[str, Any], grace_s: int, url: str
) -> optuna.storages.RDBStorage:
    last: Exception | None = None
    for attempt in range(STORAGE_OPEN_ATTEMPTS):
        try:
            storage = optuna.storages.RDBStorage(
                parsed.render_as_string(hide_password=False),
                engine_kwargs=engine_kwargs or None,
                heartbeat_interval=min(HEARTBEAT_INTERVAL_S, max(1, grace_s // 2)),
                grace_period=grace_s,
            )
            if storage.engine.dialect.name == "sqlite":
                import sqlalchemy

                sqlalchemy.event.listen(storage.engine, "connect", _fast_sqlite)
            _wait_for_drops(storage.engine, parsed)
            storage.engine.dispose()  # pooled connections predate the listeners
            return storage
        except Exception as exc:  # the server answered the probe: a schema-creation race
            last = exc
            time.sleep(STORAGE_RETRY_S * (attempt + 1))
    assert last is not None
    raise InputError(f"--storage {public_url(url)}: cannot open: {_first_line(last)}") from last


def rdb_of(storage: optuna.storages.BaseStorage) -> optuna.storages.RDBStorage | None:
    """The RDB storage under Optuna's per-study cache wrapper, or None for other storages."""
    inner = getattr(storage, "_backend", storage)  # optuna wraps RDBStorage in _CachedStorage
    return inner if isinstance(inner, optuna.storages.RDBStorage) else None


def _lock_key(study_name: str) -> int:
    """A signed 64-bit key for PostgreSQL advisory locks, stable across hosts."""
    digest = hashlib.sha256(f"tuner-study:{study_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released by the kernel if this process dies
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def _advisory_lock(engine: Any, key: int) -> Iterator[None]:
    import sqlalchemy

    with engine.connect() as conn:  # the server drops the lock with a dead worker's connection
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()


@contextmanager
def study_lock(storage: optuna.storages.BaseStorage, study_name: str) -> Iterator[None]:
    """Hold a lock on one study across processes and hosts (PostgreSQL, SQLite, journal).

    Other databases run unlocked: the trial budget can then be overshot by a trial per worker.
    """
    rdb = rdb_of(storage)
    if rdb is not None:
        engine = rdb.engine
        if engine.dialect.name == "postgresql":
            with _advisory_lock(engine, _lock_key(study_name)):
                yield
            return
        database = engine.url.database
        if engine.dialect.name == "sqlite" and database and database != ":memory:":
            with _file_lock(Path(f"{database}.tuner-lock")):
                yield
            return
    if isinstance(storage, JournalStorage):
        backend = storage._backend  # noqa: SLF001  (the file path is not public)
        if isinstance(backend, JournalFileBackend):
            with _file_lock(Path(f"{backend._file_path}.tuner-lock")):  # noqa: SLF001
                yield
            return
    yield
