"""`tuner calibrate` end to end on this machine, and calibrated profiles reaching the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.calibrate.profile import write_profile
from tuner.calibration_schema import AcceptanceCurve, Calibration, CalibrationGrid, Residual
from tuner.catalog import load_gpu, load_model
from tuner.cli import app
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, efficiency_of
from tuner.perf.predict import predict_metrics
from tuner.specs import SLA, Context, EngineConfig, GPUProfile, Workload

runner = CliRunner()


def _calibrated(gpu: GPUProfile, **efficiency: float) -> GPUProfile:
    cal = Calibration(
        backend="torch",
        model="llama-3.1-8b",
        measured_at="2026-12-03T00:00:00+00:00",
        host="test",
        efficiency=efficiency,
        residuals={
            "decode_step": Residual(median_abs_rel_error=0.02, p90_abs_rel_error=0.05, count=3)
        },
        grid=CalibrationGrid(batch=(1, 8), context=(64, 1024), chunk=(16, 512)),
    )
    return gpu.model_copy(update={"calibration": cal})


def test_profile_round_trips_and_validates(tmp_path: Path) -> None:
    gpu = _calibrated(load_gpu("h100-sxm"), weight_bandwidth_fraction=0.5, step_overhead_s=0.002)
    path = tmp_path / "cal.yaml"
    write_profile(gpu, path)
    assert load_gpu(str(path)) == gpu
    result = runner.invoke(app, ["validate", str(path), "--kind", "gpu"])
    assert result.exit_code == 0, result.output
    assert "valid gpu" in result.stdout


def test_predictions_follow_the_fitted_constants(tmp_path: Path) -> None:
    # Slower weight streaming and a larger step overhead than the defaults: every decode step is
    # longer, so TPOT must rise, through --gpu FILE alone (no explicit Efficiency anywhere).
    datasheet = load_gpu("h100-sxm")
    slow = _calibrated(datasheet, weight_bandwidth_fraction=0.36, step_overhead_s=0.003)
    assert efficiency_of(slow.calibration).weight_bandwidth_fraction == 0.36
    wl = Workload(input_tokens=512, output_tokens=64, concurrency=4, num_requests=16)
    ctx = Context(model=load_model("llama-3.1-8b"), gpu=datasheet, sla=SLA(), workload=wl)
    base = predict_metrics(EngineConfig(), ctx)
    cal = predict_metrics(EngineConfig(), ctx.model_copy(update={"gpu": slow}))
    assert cal.tpot_ms.p50 > 1.5 * base.tpot_ms.p50
    # An explicit Efficiency still wins over the profile's calibration.
    explicit = predict_metrics(
        EngineConfig(), ctx.model_copy(update={"gpu": slow}), DEFAULT_EFFICIENCY
    )
    assert explicit.tpot_ms.p50 == pytest.approx(base.tpot_ms.p50)
    path = tmp_path / "slow.yaml"
    write_profile(slow, path)
    args = [
        "predict",
        "--model",
        "llama-3.1-8b",
        "--isl",
        "512",
        "--osl",
        "64",
        "--concurrency",
        "4",
        "--num-requests",
        "16",
        "--json",
        "--gpu",
    ]
    via_file = json.loads(runner.invoke(app, [*args, str(path)]).stdout)
    via_name = json.loads(runner.invoke(app, [*args, "h100-sxm"]).stdout)
    assert via_file["tpot_ms"]["p50"] == pytest.approx(cal.tpot_ms.p50, rel=1e-6)
    assert via_file["tpot_ms"]["p50"] > 1.5 * via_name["tpot_ms"]["p50"]


def test_calibrate_torch_quick_on_this_cpu(tmp_path: Path) -> None:
    out = tmp_path / "cpu.yaml"
    # A curve `tuner acceptance --into` stored earlier survives re-calibrating into the file.
    curve = AcceptanceCurve(
        draft="ngram", per_position=[0.1, 0.6], prompts="shipped", tokens_measured=50
    )
    earlier = _calibrated(load_gpu("h100-sxm"))
    assert earlier.calibration is not None
    earlier.calibration.acceptance = [curve]
    write_profile(earlier, out)
    result = runner.invoke(
        app,
        [
            "calibrate",
            "--backend",
            "torch",
            "--model",
            "llama-tiny-20m",
            "--out",
            str(out),
            "--quick",
            "--threads",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "fit residuals" in result.stdout and "decode_step" in result.stdout
    doc = yaml.safe_load(out.read_text())
    cal = doc["calibration"]
    assert cal["backend"] == "torch" and cal["model"] == "llama-tiny-20m"
    assert "CPU" in cal["host"] and "not a datasheet" in doc["source"]
    assert set(cal["residuals"]) == {"decode_step", "prefill_step"}
    assert cal["efficiency"] and set(cal["efficiency"]) <= set(vars(DEFAULT_EFFICIENCY))
    assert runner.invoke(app, ["validate", str(out), "--kind", "gpu"]).exit_code == 0
    assert cal["acceptance"] == [curve.model_dump(mode="json")]
    # The profile drives predictions of the model it was measured with.
    pred = runner.invoke(
        app,
        [
            "predict",
            "--model",
            "llama-tiny-20m",
            "--gpu",
            str(out),
            "--isl",
            "128",
            "--osl",
            "16",
            "--concurrency",
            "2",
            "--num-requests",
            "4",
            "--json",
        ],
    )
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["tpot_ms"]["p50"] > 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--backend", "sglang"], "--backend"),
        (["--model", "no-such-model"], "no-such-model"),
        (["--model", "llama-3.1-405b"], "memory"),
    ],
)
def test_bad_input_is_one_error_line(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["calibrate", *args])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
