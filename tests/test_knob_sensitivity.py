"""Issue 19 item 2: what each knob is worth around the recommendation (one-knob sensitivity)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.catalog import load_gpu, load_model, load_sla
from tuner.cli import app
from tuner.explain.sensitivity import KnobEffect, effect_text, knob_sensitivity, top_effects
from tuner.perf.capacity import sim_capacity
from tuner.specs import Context, EngineConfig, SearchSpace, Workload

_SPACE = (
    "name: small\nquantization: [fp16, fp8]\nkv_dtype: [auto, fp8]\nmax_num_seqs: [1, 256]\n"
    "max_num_batched_tokens: [8192]\ntensor_parallel_size: [1, 2]\n"
)


def _ctx() -> Context:
    return Context(
        model=load_model("llama-3.1-8b"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla("chat"),
        workload=Workload(),
    )


@pytest.mark.unit
def test_each_other_value_of_each_knob_is_one_row_and_its_change_is_the_simulators() -> None:
    import yaml

    space = SearchSpace.model_validate(yaml.safe_load(_SPACE))
    base = EngineConfig(quantization="fp16", kv_dtype="auto", max_num_seqs=256)
    effects = knob_sensitivity(base, _ctx(), space)
    moved = sorted((e.knob, str(e.value)) for e in effects)
    assert moved == [
        ("kv_dtype", "fp8"),
        ("max_num_seqs", "1"),
        ("quantization", "fp8"),
        ("tensor_parallel_size", "2"),
    ]
    base_rps = sim_capacity(base, _ctx(), operating_point=False)[0].rps_per_gpu
    for e in effects:
        assert e.base_capacity_rps_per_gpu == pytest.approx(base_rps)
        assert e.capacity_rps_per_gpu is not None
        alone = sim_capacity(EngineConfig(**{**base.model_dump(), e.knob: e.value}), _ctx())[0]
        assert e.capacity_rps_per_gpu == pytest.approx(alone.rps_per_gpu)
    by_knob = {e.knob: e for e in effects}
    # One sequence at a time serves a fraction of 256; fp8 weights free memory and bandwidth.
    assert (by_knob["max_num_seqs"].change_pct or 0) < -50
    assert (by_knob["quantization"].change_pct or 0) > 0


@pytest.mark.unit
def test_top_effects_keep_each_knobs_best_other_value_largest_first() -> None:
    def e(knob: str, value: str, rps: float | None) -> KnobEffect:
        return KnobEffect(
            knob=knob, base_value="x", value=value, capacity_rps_per_gpu=rps,
            base_capacity_rps_per_gpu=10.0, reason=None if rps is not None else "does not fit",
        )  # fmt: skip

    effects = [e("a", "1", 2.0), e("a", "2", 9.5), e("b", "1", 13.0), e("c", "1", None)]
    top = top_effects(effects)
    assert [(t.knob, t.value) for t in top] == [("b", "1"), ("a", "2")]
    assert effect_text(top[0]) == "b 1 instead of x: +30%"
    assert "cannot run (does not fit)" in effect_text(effects[-1])


def test_a_capacity_tune_writes_sensitivity_csv_and_names_the_top_three_within_100_columns(
    tmp_path: Path,
) -> None:
    space = tmp_path / "small.yaml"
    space.write_text(_SPACE)
    run = tmp_path / "run"
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]
    args += ["--space", str(space), "--trials", "8", "--run-dir", str(run)]
    result = CliRunner().invoke(app, args, terminal_width=100)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((run / "sensitivity.csv").open()))
    assert rows and {r["knob"] for r in rows} <= {
        "quantization",
        "kv_dtype",
        "max_num_seqs",
        "tensor_parallel_size",
    }
    lines = result.output.splitlines()
    head = lines.index(
        "  capacity if one knob alone moves (simulator; every value: sensitivity.csv):"
    )
    shown = [ln for ln in lines[head + 1 : head + 4] if " instead of " in ln]
    assert 1 <= len(shown) <= 3
    summary = lines[lines.index(next(ln for ln in lines if ln.startswith("recommended:"))) :]
    # File paths are never cut (they depend on where the run folder is); the rest fits.
    wide = [ln for ln in summary if len(ln) > 100 and str(run) not in ln]
    assert not wide
