"""A throwaway PostgreSQL server for the tests: initdb + pg_ctl on a temp folder and a free
loopback port, stopped and deleted at the end. Needs the Debian `postgresql` package
(scripts/setup.sh --all installs it) and psycopg (the `scale` extra)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["missing_reason", "postgres_server"]

USER = "tuner"


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def missing_reason() -> str | None:
    """Why no server can be started here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'tuner[scale]')"
    if _bindir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql; scripts/setup.sh --all)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; the Debian package creates the `postgres` user.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server; yields a SQLAlchemy URL for its `postgres` database."""
    bindir = _bindir()
    assert bindir is not None
    data = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(data, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    run = {"check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "timeout": 120}
    subprocess.run(_as_server_user([str(bindir / "initdb"), "-D", str(data / "db"), "-U", USER,
                                    "-A", "trust", "--no-sync"]), **run)  # type: ignore[call-overload]  # fmt: skip
    options = f"-k {data} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = str(bindir / "pg_ctl")
    subprocess.run(_as_server_user([pg_ctl, "-D", str(data / "db"), "-o", options, "-l",
                                    str(data / "server.log"), "-w", "start"]), **run)  # type: ignore[call-overload]  # fmt: skip
    try:
        yield f"postgresql+psycopg://{USER}@127.0.0.1:{port}/postgres"
    finally:
        stop = [pg_ctl, "-D", str(data / "db"), "-m", "immediate", "-w", "stop"]
        subprocess.run(_as_server_user(stop), check=False, capture_output=True, timeout=60)
        shutil.rmtree(data, ignore_errors=True)
