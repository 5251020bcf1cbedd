"""One identity check for every folder and study a command writes: a run folder, a shared study,
the run.yaml a report rebuilds under and a plan's --run-dir never take another run's inputs; the
refusal is one line (exit 2) naming the fields that differ and what to do."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from typer.testing import CliRunner

from tuner.cli import app
from tuner.run.identity import differing_fields, other_run_error
from tuner.run_spec import NOT_IDENTITY, RUN_IDENTITY, RunSpec, build_run_spec

runner = CliRunner()
SMALL = ["--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--sla", "chat"]


def _refused(args: list[str]) -> str:
    """The one error line of a command that must be refused with exit 2."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.unit
def test_every_run_spec_field_but_the_budgets_is_identity() -> None:
    # A new RunSpec field is identity unless someone says it only sizes the search.
    assert set(RUN_IDENTITY) | NOT_IDENTITY == set(RunSpec.model_fields)
    assert {"trials", "timeout_s", "tuner_version"} == NOT_IDENTITY
    for field in ("capacity_load", "probe_budget", "mode", "sampler", "seed", "model_source"):
        assert field in RUN_IDENTITY


@pytest.mark.unit
def test_the_identity_ignores_budgets_and_host_paths_only() -> None:
    spec = build_run_spec(model="llama-3.2-1b", gpu="h200-sxm", trials=10)
    same = spec.model_copy(
        update={
            "trials": 99,
            "timeout_s": 5.0,
            "tuner_version": "9.9",
            "backend_options": {"model_path": "/elsewhere"},  # weights on another host
        }
    )
    assert differing_fields(spec.identity(), same.identity()) == []
    other = build_run_spec(model="llama-3.2-1b", gpu="h200-sxm", probes=3, probe_seconds=7)
    assert differing_fields(spec.identity(), other.identity()) == ["probe_budget"]
    users = build_run_spec(model="llama-3.2-1b", gpu="h200-sxm", capacity_load="users")
    assert differing_fields(spec.identity(), users.identity()) == ["capacity_load"]


@pytest.mark.unit
def test_the_refusal_names_each_field_and_never_echoes_a_password() -> None:
    there = {"seed": 0, "storage": "postgresql://u:secret@db/x", "space": {"a": [1] * 50}}
    here = {"seed": 1, "storage": "postgresql://u:secret@db/y", "space": {"a": [2] * 50}}
    line = str(other_run_error("R", there, here, "do this"))
    assert line.startswith("R holds another run (differs in seed 0 there, 1 here; storage ")
    assert "space)" in line and line.endswith(": do this") and "secret" not in line


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--seed", "5"], "seed 0 there, 5 here"),
        (["--sampler", "random"], "sampler"),
        (["--seed", "7", "--sampler", "nsga2"], "seed 0 there, 7 here"),
    ],
)
def test_a_second_tune_into_a_run_dir_with_another_seed_or_sampler_is_refused(
    flags: list[str], named: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    _ok(["tune", *SMALL, "--trials", "5", "--run-dir", str(run)])
    before = (run / "run.yaml").read_text()
    line = _refused(["tune", *SMALL, "--trials", "8", "--run-dir", str(run), *flags])
    assert named in line and "--run-dir" in line and f"--resume {run}" in line
    assert (run / "run.yaml").read_text() == before
    # Another budget alone is the same run: it continues the study.
    _ok(["tune", *SMALL, "--trials", "7", "--run-dir", str(run)])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--capacity-load", "users"], "capacity_load 'rate' there, 'users' here"),
        (["--probes", "3"], "probe_budget"),
        (["--probe-seconds", "5"], "probe_budget"),
    ],
)
def test_a_shared_study_refuses_another_load_mode_or_probe_budget(
    flags: list[str], named: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    common = ["tune", *SMALL, "--storage", url, "--study", "s"]
    _ok([*common, "--trials", "4", "--run-dir", str(tmp_path / "a")])
    line = _refused([*common, "--trials", "6", "--run-dir", str(tmp_path / "b"), *flags])
    assert "study 's'" in line and named in line and "--study" in line
    study = optuna.load_study(study_name="s", storage=url)
    assert len(study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))) == 4


def test_report_refuses_a_run_yaml_that_is_not_the_studys(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _ok(["tune", *SMALL, "--trials", "4", "--run-dir", str(a)])
    _ok(["tune", *SMALL, "--trials", "4", "--seed", "3", "--probes", "4", "--run-dir", str(b)])
    (a / "run.yaml").write_text((b / "run.yaml").read_text())  # another run's inputs
    line = _refused(["report", str(a)])
    assert "seed 0 there, 3 here" in line and "probe_budget" in line and "run.yaml" in line
    # A run.yaml with only another budget still reports the run.
    doc = yaml.safe_load((b / "run.yaml").read_text())
    (b / "run.yaml").write_text(yaml.safe_dump({**doc, "trials": 50}))
    assert "rebuilt 4 trials" in _ok(["report", str(b)])


def test_report_from_storage_refuses_a_folder_holding_another_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    _ok(["tune", *SMALL, "--trials", "4", "--storage", url, "--run-dir", str(tmp_path / "a")])
    other = tmp_path / "other"
    _ok(["tune", *SMALL, "--trials", "4", "--seed", "2", "--run-dir", str(other)])
    before = (other / "run.yaml").read_text()
    line = _refused(["report", "--storage", url, str(other)])
    assert "seed 2 there, 0 here" in line
    assert (other / "run.yaml").read_text() == before


PLAN = ["plan", "--model", "llama-3.1-8b", "--gpus", "h100-sxm,l40s", "--rate", "5"]


def test_two_plans_into_one_run_dir_never_mix(tmp_path: Path) -> None:
    run = tmp_path / "plan"
    _ok([*PLAN, "--run-dir", str(run)])
    first = sorted(p.name for p in (run / "exports").iterdir())
    plan_yaml = (run / "plan.yaml").read_text()
    line = _refused(["plan", "--model", "llama-3.2-1b", "--gpus", "l40s", "--rate", "9",
                     "--run-dir", str(run)])  # fmt: skip
    assert "model 'llama-3.1-8b' there, 'llama-3.2-1b' here" in line and "rate_rps" in line
    assert "--run-dir" in line
    assert (run / "plan.yaml").read_text() == plan_yaml  # untouched
    assert sorted(p.name for p in (run / "exports").iterdir()) == first
    # The same request again rewrites its own plan whole.
    _ok([*PLAN, "--run-dir", str(run)])
    assert sorted(p.name for p in (run / "exports").iterdir()) == first


def test_a_plan_leaves_no_stale_exports_and_refuses_a_tune_folder(tmp_path: Path) -> None:
    run = tmp_path / "plan"
    _ok([*PLAN, "--run-dir", str(run)])
    stale = run / "exports" / "a100-sxm"  # a kind an earlier write of this plan recommended
    stale.mkdir()
    (stale / "launch.sh").write_text("old")
    _ok([*PLAN, "--run-dir", str(run)])
    assert not stale.exists()
    tune_dir = tmp_path / "tune"
    _ok(["tune", *SMALL, "--trials", "3", "--run-dir", str(tune_dir)])
    assert "holds a tune run" in _refused([*PLAN, "--run-dir", str(tune_dir)])


def test_plans_started_in_the_same_second_get_their_own_folders(tmp_path: Path) -> None:
    from datetime import datetime

    from tuner.plan import load_prices, plan
    from tuner.plan.folder import write_plan_folder

    req_a = _request("llama-3.1-8b")
    req_b = _request("llama-3.2-1b")
    now = datetime(2026, 1, 1, 12, 0, 0)
    prices = load_prices(None, extra_names=[g.name for g in req_a.gpus])
    a = write_plan_folder(plan(req_a, prices), run_dir=None, out=tmp_path, now=now)
    b = write_plan_folder(plan(req_b, prices), run_dir=None, out=tmp_path, now=now)
    c = write_plan_folder(plan(req_a, prices), run_dir=None, out=tmp_path, now=now)
    assert len({a, b, c}) == 3
    for folder, model in ((a, "llama-3.1-8b"), (b, "llama-3.2-1b"), (c, "llama-3.1-8b")):
        assert f"name: {model}" in (folder / "plan.yaml").read_text()


def _request(model: str):  # type: ignore[no-untyped-def]
    from tuner.cli.plan_cmd import build_plan_request

    return build_plan_request(
        model=model,
        sla="chat",
        gpus="l40s",
        rate=2.0,
        users=None,
        think_time=0.0,
        headroom=0.2,
        max_gpus_per_replica=2,
        isl=512,
        osl=128,
        num_requests=50,
        space="default",
    )
