"""SIGTERM and SIGHUP stop `tuner tune` the way Ctrl-C does: the finished trials are written
(report.html, trials.csv, best.yaml), no trial is left RUNNING, one line says how to resume, exit
130, and `--resume` completes the budget. Ctrl-C while the CLI imports is one line, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.cli.signals import interrupt_on_stop_signals
from tuner.search.storage import make_storage

SMALL = ["--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner", *args]


def _default_signals() -> None:
    """In the child: the stop signals at their defaults, whatever the test runner inherited (a
    suite started under `nohup` ignores SIGHUP, a background job SIGINT, and a process keeps
    a signal it was started ignoring)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _trials(run: Path) -> list[optuna.trial.FrozenTrial]:
    if not (run / "run.yaml").is_file():  # opening the journal first would create it
        return []
    try:
        storage = make_storage(f"journal:{run / 'study.journal'}")
        return optuna.load_study(study_name="tuner", storage=storage).get_trials()
    except Exception:  # not created yet
        return []


def _finished(run: Path) -> int:
    return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in _trials(run))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_mid_tune_writes_the_finished_trials_and_resume_completes(
    sig: signal.Signals, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    budget = 400
    proc = subprocess.Popen(
        _cli("tune", *SMALL, "--trials", str(budget), "--run-dir", str(run)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )
    deadline = time.time() + 120
    while _finished(run) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if proc.poll() is not None:
        pytest.fail(f"the tune ended before it could be stopped: {proc.communicate()[1]}")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "interrupted" in lines[0] and "--resume" in lines[0], err
    for name in ("report.html", "trials.csv", "best.yaml"):
        assert (run / name).is_file(), name
    trials = _trials(run)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    kept = _finished(run)
    assert 0 < kept < budget
    rows = (run / "trials.csv").read_text().splitlines()[1:]
    assert len(rows) == len(trials)  # every trial in the study is in the CSV

    resumed = subprocess.run(
        _cli("tune", "--resume", str(run), "--trials", str(kept + 5)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert _finished(run) == kept + 5
    assert not [t for t in _trials(run) if t.state == TrialState.RUNNING]


@pytest.mark.slow
def test_ctrl_c_while_the_cli_imports_is_one_line(tmp_path: Path) -> None:
    # Stop it at once: the commands' imports take about a second, this lands inside them.
    proc = subprocess.Popen(
        _cli("tune", "--help"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0 or "Usage" in out:
        # The imports and the help finished before the signal (a fast machine): the signal
        # landed in the interpreter's teardown, which is not what this test is about.
        pytest.skip("the imports finished before the signal (a fast machine)")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip() == "error: interrupted"


@pytest.mark.unit
def test_stop_signals_raise_keyboard_interrupt_only_inside_the_block() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), interrupt_on_stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs at the next bytecode; the sleep is cut short
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.unit
def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts a process
    try:
        with interrupt_on_stop_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.unit
def test_off_the_main_thread_nothing_is_installed() -> None:
    seen: list[object] = []

    def body() -> None:
        with interrupt_on_stop_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]
