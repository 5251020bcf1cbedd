"""A study database that drops for seconds is waited for (retries with backoff); one that stays
away ends the command with one BackendError line (exit 4) naming it, password masked."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import _postgres
import optuna
import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.errors import BackendError, InputError
from tuner.search import reconnect
from tuner.search.reconnect import Reconnect, is_transient
from tuner.search.storage import make_storage

runner = CliRunner()


class _Server:
    """A throwaway PostgreSQL server this test can stop and start again on the same port."""

    def __init__(self, data: Path, port: int) -> None:
        bindir = _postgres._bindir()  # noqa: SLF001
        assert bindir is not None
        self.pg_ctl, self.data, self.port = str(bindir / "pg_ctl"), data, port
        self.url = f"postgresql+psycopg://{_postgres.USER}@127.0.0.1:{port}/postgres"

    def _ctl(self, *args: str) -> None:
        cmd = [self.pg_ctl, "-D", str(self.data / "db"), *args]
        subprocess.run(_postgres._as_server_user(cmd), check=True, capture_output=True, timeout=60)  # noqa: SLF001

    def start(self) -> None:
        """Start it and wait until it accepts connections."""
        options = f"-k {self.data} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.data / "server.log"), "-w", "start")

    def stop(self) -> None:
        """Stop it at once (connections are cut, as a crash or a failover cuts them)."""
        self._ctl("-m", "immediate", "-w", "stop")


@contextmanager
def _server() -> Iterator[_Server]:
    reason = _postgres.missing_reason()
    if reason:
        pytest.skip(reason)
    data = Path(tempfile.mkdtemp(prefix="tuner-pg-retry-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(data, entry.pw_uid, entry.pw_gid)
    bindir = _postgres._bindir()  # noqa: SLF001
    assert bindir is not None
    init = [str(bindir / "initdb"), "-D", str(data / "db"), "-U", _postgres.USER, "-A", "trust"]
    subprocess.run(
        _postgres._as_server_user([*init, "--no-sync"]),  # noqa: SLF001
        check=True,
        capture_output=True,
        timeout=120,
    )
    server = _Server(data, _postgres._free_port())  # noqa: SLF001
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            server.stop()
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("message", "transient"),
    [
        ('connection to server at "127.0.0.1", port 1 failed: Connection refused', True),
        ("connection failed: timeout expired", True),
        ("FATAL:  the database system is starting up", True),
        ("server closed the connection unexpectedly", True),
        ('FATAL:  password authentication failed for user "x"', False),
        ('FATAL:  database "nope" does not exist', False),
        ("fe_sendauth: no password supplied", False),
        ('could not translate host name "nohost" to address', False),
    ],
)
def test_which_connection_failures_are_waited_for(message: str, transient: bool) -> None:
    assert is_transient(RuntimeError(message)) is transient


@pytest.mark.unit
def test_reconnect_backs_off_then_gives_up_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    clock = [0.0]

    def fake_sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    monkeypatch.setattr(reconnect.time, "sleep", fake_sleep)
    monkeypatch.setattr(reconnect.time, "monotonic", lambda: clock[0])

    def refused() -> None:
        raise RuntimeError("Connection refused")

    hook = Reconnect("postgresql+psycopg://u:***@db:5432/x")
    with pytest.raises(BackendError, match=r"u:\*\*\*@db:5432/x is unreachable") as info:
        hook.connect(refused)
    assert "\n" not in str(info.value) and info.value.exit_code == 4
    assert slept[:4] == [0.5, 1.0, 2.0, 4.0]  # exponential backoff
    assert sum(slept) == pytest.approx(reconnect.RECONNECT_TOTAL_S)  # bounded
    slept.clear()
    with pytest.raises(BackendError):
        hook.connect(refused)  # given up once: the next connection is tried once, no wait
    assert slept == []
    calls = []

    def comes_back() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("Connection refused")
        return "connection"

    hook = Reconnect("db")
    assert hook.connect(comes_back) == "connection"  # back within the budget: no error
    with pytest.raises(RuntimeError, match="password"):  # waiting will not fix it: at once
        hook.connect(lambda: (_ for _ in ()).throw(RuntimeError("password authentication")))


def test_an_unreachable_database_is_retried_then_exit_4_with_the_password_masked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("psycopg")
    monkeypatch.setattr(reconnect, "RECONNECT_TOTAL_S", 1.5)
    started = time.monotonic()
    result = runner.invoke(
        app,
        ["tune", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--trials", "3",
         "--storage", "postgresql+psycopg://user:secret@127.0.0.1:1/db",
         "--run-dir", str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code == 4, result.output
    assert 1.5 <= time.monotonic() - started < 10
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0] and "attempt(s)" in lines[0]
    assert "secret" not in result.output and "user:***@127.0.0.1:1/db" in lines[0]


@pytest.mark.slow
def test_a_database_restart_mid_run_is_waited_for() -> None:
    with _server() as server:
        storage = make_storage(server.url)
        study = optuna.create_study(study_name="drop", storage=storage)
        study.set_user_attr("before", 1)
        server.stop()
        restart = threading.Timer(2.0, server.start)
        restart.start()
        try:
            study.set_user_attr("after", 2)  # waits for the server instead of failing
        finally:
            restart.join()
        assert optuna.load_study(study_name="drop", storage=server.url).user_attrs == {
            "before": 1,
            "after": 2,
        }
        started = time.monotonic()
        with pytest.raises(InputError, match="does not exist"):  # the URL's fault: no waiting
            make_storage(server.url.replace("/postgres", "/no_such_db"))
        assert time.monotonic() - started < 2


@pytest.mark.slow
def test_a_database_that_stays_down_ends_in_a_backend_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _server() as server:
        storage = make_storage(server.url)
        study = optuna.create_study(study_name="gone", storage=storage)
        server.stop()
        monkeypatch.setattr(reconnect, "RECONNECT_TOTAL_S", 1.0)
        with pytest.raises(BackendError, match="unreachable"):
            study.set_user_attr("after", 2)
