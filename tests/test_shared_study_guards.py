"""Shared storages and run folders never mix runs: a study records what it is for, a busy run
folder is refused, bad storage URLs fail fast in one line, workers get distinct seeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from typer.testing import CliRunner

from tuner.cli import app
from tuner.run.tune import open_study
from tuner.run.worker import work
from tuner.run_spec import build_run_spec
from tuner.search.parallel import ATTR_WORKER, SYS_FAILED_TRIAL, RequeueOnce
from tuner.search.storage import make_storage

runner = CliRunner()
SMALL = ["--gpu", "h200-sxm", "--sla", "chat"]


def _tune(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["tune", *SMALL, *args])
    return result.exit_code, result.output


def _one_error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_a_shared_storage_refuses_a_run_with_other_inputs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    code, out = _tune(
        "--model",
        "llama-3.2-1b",
        "--trials",
        "6",
        "--storage",
        url,
        "--run-dir",
        str(tmp_path / "a"),
    )
    assert code == 0, out
    out = _one_error_line(
        [
            "tune",
            *SMALL,
            "--model",
            "llama-3.1-70b",
            "--trials",
            "8",
            "--storage",
            url,
            "--run-dir",
            str(tmp_path / "b"),
        ]
    )
    assert "holds another run" in out and "llama-3.2-1b" in out and "llama-3.1-70b" in out
    study = optuna.load_study(study_name="tuner", storage=url)
    finished = study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(finished) == 6  # the refused run added nothing
    # The same inputs join the study (that is how processes share one).
    code, out = _tune(
        "--model",
        "llama-3.2-1b",
        "--trials",
        "9",
        "--storage",
        url,
        "--run-dir",
        str(tmp_path / "c"),
    )
    assert code == 0, out


def test_reusing_a_run_folder_for_another_model_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "R"
    assert _tune("--model", "llama-3.2-1b", "--trials", "5", "--run-dir", str(run))[0] == 0
    before = (run / "run.yaml").read_text()
    code, out = _tune("--model", "llama-3.1-70b", "--trials", "5", "--run-dir", str(run))
    assert code == 2 and "another run" in out, out  # the folder check or the study's record
    assert (run / "run.yaml").read_text() == before  # the first run's inputs are untouched


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "sqlite:////no/such/folder/x.db",
        "nosuchdb://host/db",
        "journal:/",
    ],
)
def test_a_bad_storage_url_fails_fast_in_one_line(url: str, tmp_path: Path) -> None:
    # A server that does not answer is waited for, then exit 4: tests/test_postgres_retry.py.
    started = time.monotonic()
    out = _one_error_line(
        [
            "tune",
            *SMALL,
            "--model",
            "llama-3.2-1b",
            "--trials",
            "3",
            "--storage",
            url,
            "--run-dir",
            str(tmp_path / "r"),
        ]
    )
    assert time.monotonic() - started < 5
    assert "secret" not in out  # passwords are masked


def test_worker_refuses_bad_requests_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    result = runner.invoke(app, ["worker", "--storage", url, "--study", "none"])
    assert result.exit_code == 2 and "no study 'none'" in result.output
    assert (
        _tune(
            "--model",
            "llama-3.2-1b",
            "--trials",
            "3",
            "--storage",
            url,
            "--study",
            "s",
            "--run-dir",
            str(tmp_path / "r"),
        )[0]
        == 0
    )
    for extra, words in (
        (["--backend", "vllm"], "evaluates with --backend sim"),
        (["--trials", "2", "--until-done"], "exclusive"),
        (["--trials", "0"], "at least 1"),
    ):
        result = runner.invoke(app, ["worker", "--storage", url, "--study", "s", *extra])
        assert result.exit_code == 2 and words in result.output, result.output


def test_workers_on_one_study_get_distinct_seeds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = build_run_spec(
        model="llama-3.1-8b", gpu="h200-sxm", trials=40, storage=url, study_name="seeds"
    )
    open_study(spec, tmp_path / "creator", create=True)  # what `tune` does first: worker 0
    first = work(url, "seeds", max_trials=8)
    second = work(url, "seeds", max_trials=8)
    assert (first.seed, second.seed) == (1, 2)
    study = optuna.load_study(study_name="seeds", storage=url)
    by_worker: dict[str, list[dict[str, object]]] = {}
    for t in study.trials:
        by_worker.setdefault(t.user_attrs[ATTR_WORKER], []).append(t.params)
    proposals = list(by_worker.values())
    assert len(proposals) == 1 or proposals[0] != proposals[1]
    # Both ran in this process: the trials are in one list, 8 from each seed.
    params = [t.params for t in study.trials]
    assert params[:8] != params[8:16]
    assert sum(p in params[:8] for p in params[8:16]) <= 2


def test_a_trial_killed_mid_sampling_is_retried_with_the_knobs_it_had_drawn() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    killed = study.ask()
    quant = killed.suggest_categorical("quantization", ["int8", "fp8"])
    study.tell(killed, state=TrialState.FAIL)  # the kill came before the second knob was drawn
    requeue = RequeueOnce()
    requeue(study, study.trials[0])
    retry = study.ask()
    assert retry.suggest_categorical("quantization", ["int8", "fp8"]) == quant
    assert 1 <= retry.suggest_int("max_num_seqs", 1, 512) <= 512  # the rest is drawn afresh
    study.tell(retry, 1.0)
    done = study.trials[1]
    assert done.system_attrs[SYS_FAILED_TRIAL] == 0 and done.params["quantization"] == quant
    requeue(study, done)  # a retry is never queued again
    assert len(study.trials) == 2 and requeue.failed == [0, 1]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner", *args]


def _study(run: Path) -> optuna.Study:
    return optuna.load_study(
        study_name="tuner", storage=make_storage(f"journal:{run / 'study.journal'}")
    )


def _done(journal: Path) -> int:
    try:
        study = optuna.load_study(study_name="tuner", storage=make_storage(f"journal:{journal}"))
    except Exception:
        return 0
    return len(study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)))


@pytest.mark.slow
def test_a_second_resume_of_a_busy_run_folder_is_refused_and_kills_nothing(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        _cli("tune", "--model", "llama-3.1-8b", *SMALL, "--trials", "5000", "--run-dir", str(run)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while _done(run / "study.journal") < 8 and time.time() < deadline:
        time.sleep(0.2)
    refused = runner.invoke(app, ["tune", "--resume", str(run), "--trials", "5000"])
    assert refused.exit_code == 2 and "in use by another tuner process" in refused.output
    assert f"pid {proc.pid}" in refused.output
    time.sleep(1.0)
    assert proc.poll() is None  # the first run goes on
    study = _study(run)
    assert not study.get_trials(states=(TrialState.FAIL,))  # its running trial was not failed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    target = _done(run / "study.journal") + 3
    resumed = runner.invoke(app, ["tune", "--resume", str(run), "--trials", str(target)])
    assert resumed.exit_code == 0, resumed.output
    study = _study(run)
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert len(failed) <= 1  # the trial the kill interrupted, if it was mid-trial
    for t in failed:
        assert "died; re-queued" in t.user_attrs["reason"]
        retry = [r for r in study.trials if r.system_attrs.get("failed_trial") == t.number]
        if not t.params:  # killed before it sampled anything: a fresh trial takes its place
            assert not retry
            continue
        assert len(retry) == 1 and retry[0].state in (TrialState.COMPLETE, TrialState.PRUNED)
        # A kill mid-sampling leaves some knobs drawn: the retry keeps those and draws the rest.
        assert t.params.items() <= retry[0].params.items()
    assert _done(run / "study.journal") == target
    assert yaml.safe_load((run / "run.yaml").read_text())["trials"] == target


def test_tune_jobs_2_shares_the_budget_between_two_processes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, out = _tune(
        "--model", "llama-3.1-8b", "--trials", "24", "--jobs", "2", "--run-dir", str(run)
    )
    assert code == 0, out
    assert (run / "study.journal").is_file() and (run / "workers" / "worker-1.log").is_file()
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run / "study.journal"))
    )
    study = optuna.load_study(study_name="tuner", storage=storage)
    finished = study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(finished) == len(study.trials) == 24  # exactly the budget, nothing failed
    # The second process joined with the next seed and stopped at the budget by itself.
    assert "worker 1 (seed 1) ran" in (run / "workers" / "worker-1.log").read_text()
    rebuilt = runner.invoke(app, ["report", str(run)])
    assert rebuilt.exit_code == 0, rebuilt.output
    _one_error_line(
        ["tune", *SMALL, "--model", "llama-3.1-8b", "--jobs", "0", "--run-dir", str(tmp_path / "x")]
    )


def test_the_journal_storage_appends_without_fsync_and_another_process_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fsync(fd: int) -> None:
        raise AssertionError("the journal must not fsync each log line")

    monkeypatch.setattr(os, "fsync", no_fsync)
    url = f"journal:{tmp_path / 'study.journal'}"
    writer = optuna.create_study(study_name="s", storage=make_storage(url))
    writer.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    reader = optuna.load_study(study_name="s", storage=make_storage(url))
    assert [t.params for t in reader.trials] == [t.params for t in writer.trials]
    lines = (tmp_path / "study.journal").read_bytes().splitlines(keepends=True)
    assert lines and all(line.endswith(b"\n") for line in lines)  # whole lines only
