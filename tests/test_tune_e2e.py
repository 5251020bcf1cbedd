"""End-to-end `tuner tune` with the real sim backend: files, resume after kill -9, shared study,
repeat from run.yaml, report rebuild, export of any trial, nothing-feasible exit code."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.search.storage import make_storage

runner = CliRunner()
BASE = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]


def _tune(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*BASE, *args])
    return result.exit_code, result.output


def _trials(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_small_tune_writes_every_output_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, out = _tune("--trials", "25", "--run-dir", str(run))
    assert code == 0, out
    for name in (
        "report.html",
        "trials.csv",
        "pareto.csv",
        "best.yaml",
        "run.yaml",
        "study.journal",
        "exports/vllm.yaml",
        "exports/vllm.sh",
        "exports/README.md",
    ):
        assert (run / name).is_file(), name
    rows = _trials(run / "trials.csv")
    assert len(rows) == 25 and [int(r["trial"]) for r in rows] == list(range(25))
    best = yaml.safe_load((run / "best.yaml").read_text())
    rec = best["recommended"]
    assert rec["ttft_p95_ms"] <= 500 and rec["tpot_p95_ms"] <= 50
    # The export carries the exact simulated point.
    vllm_cfg = yaml.safe_load((run / "exports" / "vllm.yaml").read_text())
    assert vllm_cfg["max-num-seqs"] == rec["config"]["max_num_seqs"]
    assert vllm_cfg["max-num-batched-tokens"] == rec["config"]["max_num_batched_tokens"]
    assert "recommended: trial" in out


def test_run_yaml_repeats_the_run_and_report_rebuilds(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert _tune("--trials", "20", "--seed", "7", "--run-dir", str(first))[0] == 0
    result = runner.invoke(
        app, ["tune", "--config", str(first / "run.yaml"), "--run-dir", str(second)]
    )
    assert result.exit_code == 0, result.output
    knobs = ("quantization", "kv_dtype", "max_num_seqs", "tensor_parallel_size", "state")
    a = [[r[k] for k in knobs] for r in _trials(first / "trials.csv")]
    b = [[r[k] for k in knobs] for r in _trials(second / "trials.csv")]
    assert a == b
    (first / "report.html").unlink()
    rebuilt = runner.invoke(app, ["report", str(first)])
    assert rebuilt.exit_code == 0 and (first / "report.html").is_file()
    n = next(r["trial"] for r in _trials(first / "trials.csv") if r["state"] == "complete")
    exported = runner.invoke(app, ["export", str(first), "--trial", n])
    assert exported.exit_code == 0, exported.output
    assert (first / "exports" / f"trial-{n}" / "README.md").is_file()
    pruned = [r["trial"] for r in _trials(first / "trials.csv") if r["state"] == "pruned"]
    if pruned:
        refused = runner.invoke(app, ["export", str(first), "--trial", pruned[0]])
        assert refused.exit_code == 2 and "no engine config" in refused.output


def test_a_run_folder_with_the_older_sqlite_study_still_reports_and_resumes(
    tmp_path: Path,
) -> None:
    run = tmp_path / "old"
    run.mkdir()
    db = f"sqlite:///{run / 'study.db'}"
    assert _tune("--trials", "6", "--storage", db, "--run-dir", str(run))[0] == 0
    spec = yaml.safe_load((run / "run.yaml").read_text())
    spec.pop("storage")  # as a tuner that kept every study in the folder's study.db wrote it
    (run / "run.yaml").write_text(yaml.safe_dump(spec))
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    resumed = runner.invoke(app, ["tune", "--resume", str(run), "--trials", "9"])
    assert resumed.exit_code == 0, resumed.output
    assert len(_trials(run / "trials.csv")) == 9 and not (run / "study.journal").exists()


def test_nothing_feasible_exits_3_with_the_closest_variants(tmp_path: Path) -> None:
    code, out = _tune(
        "--trials", "15", "--ttft-ms", "1", "--tpot-ms", "0.01", "--run-dir", str(tmp_path / "r")
    )
    assert code == 3
    assert "no variant met the SLA" in out and "Closest variants" in out
    assert "Traceback" not in out
    assert yaml.safe_load((tmp_path / "r" / "best.yaml").read_text())["recommended"] is None


def test_bad_input_exits_2_in_one_line(tmp_path: Path) -> None:
    code, out = _tune("--sampler", "annealing", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "unknown sampler" in out and "Traceback" not in out


def _complete_numbers(journal: Path) -> set[int]:
    study = optuna.load_study(study_name="tuner", storage=make_storage(f"journal:{journal}"))
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return {t.number for t in study.get_trials(states=done)}


def _cli(*args: str) -> list[str]:
    return (
        [sys.executable, "-m", "tuner.cli", *args]
        if False
        else [  # noqa: SIM108
            sys.executable,
            "-c",
            "from tuner.cli import main; main()",
            *args,
        ]
    )


def _count_done(journal: Path) -> int:
    if not journal.exists():
        return 0
    try:
        return len(_complete_numbers(journal))
    except Exception:  # the study is not created yet
        return 0


@pytest.mark.slow
def test_resume_after_kill_9_keeps_every_finished_trial(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = _cli(*BASE, "--trials", "5000", "--run-dir", str(run))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = run / "study.journal"
    deadline = time.time() + 120
    while _count_done(db) < 15 and time.time() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _complete_numbers(db)
    assert len(before) >= 15
    target = len(before) + 10
    result = runner.invoke(app, ["tune", "--resume", str(run), "--trials", str(target)])
    assert result.exit_code == 0, result.output
    after = _complete_numbers(db)
    assert before <= after  # nothing lost
    assert len(after) == target  # nothing repeated, budget honoured
    assert len(_trials(run / "trials.csv")) >= target


@pytest.mark.slow
def test_two_workers_share_one_study_without_lost_or_duplicated_trials(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    url = f"sqlite:///{db}"
    procs = [
        subprocess.Popen(
            _cli(
                *BASE,
                "--trials",
                "40",
                "--storage",
                url,
                "--study",
                "shared",
                "--run-dir",
                str(tmp_path / f"w{i}"),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
    study = optuna.load_study(study_name="shared", storage=url)
    numbers = [t.number for t in study.trials]
    assert sorted(numbers) == list(range(len(numbers)))  # no gaps, no duplicates
    done = [t for t in study.trials if t.state.is_finished()]
    assert len(done) == len(study.trials) >= 40
    assert all(t.state != optuna.trial.TrialState.FAIL for t in study.trials)
    # Both workers contributed (each writes its own run folder from the shared study).
    for i in range(2):
        assert len(_trials(tmp_path / f"w{i}" / "trials.csv")) >= 20
