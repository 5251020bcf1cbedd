"""Issue 19 item 1: what stops a variant's load from rising (the binding limit), with evidence."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner.backends import evaluate_capacity
from tuner.backends.binding import DRIVERS, binding_for, binding_limit
from tuner.backends.sim import SimBackend
from tuner.catalog import load_gpu, load_model, load_sla
from tuner.cli import app
from tuner.perf.capacity import sim_capacity
from tuner.perf.costs import step_cost_model
from tuner.specs import SLA, Context, EngineConfig, Workload


def _ctx(sla: SLA, wl: Workload | None = None, gpu: str = "h200-sxm") -> Context:
    return Context(
        model=load_model("llama-3.1-8b"), gpu=load_gpu(gpu), sla=sla, workload=wl or Workload()
    )


def _binding(config: EngineConfig, ctx: Context):  # type: ignore[no-untyped-def]
    cap, m = sim_capacity(config, ctx)
    assert m.feasible, m.reason
    return binding_limit(config, ctx, cap, m)


_CONFIGS = st.builds(
    EngineConfig,
    quantization=st.sampled_from(["fp16", "fp8", "int4-awq"]),
    kv_dtype=st.sampled_from(["auto", "fp8"]),
    max_num_seqs=st.sampled_from([2, 16, 256]),
    tensor_parallel_size=st.sampled_from([1, 2]),
)


@pytest.mark.unit
@settings(max_examples=12, deadline=None)
@given(config=_CONFIGS, slack=st.sampled_from([SLA(), SLA(ttft_ms=1e7, tpot_ms=1e7)]))
def test_a_variant_whose_sla_bounds_are_all_slack_is_never_bound_by_an_sla_bound(
    config: EngineConfig, slack: SLA
) -> None:
    b = _binding(config, _ctx(slack))
    assert b.bound not in ("ttft", "tpot", "unmet")
    assert b.bound == "saturation" and b.utilisation == pytest.approx(1.0)
    assert b.driver in DRIVERS


@pytest.mark.unit
def test_a_tight_tpot_bound_binds_and_names_the_probe_that_broke_it() -> None:
    ctx = _ctx(SLA(ttft_ms=2000, tpot_ms=8))
    cap, m = sim_capacity(EngineConfig(), ctx)
    b = binding_limit(EngineConfig(), ctx, cap, m)
    assert b.bound == "tpot"
    assert b.above_load is not None and cap.at_sla is not None
    assert b.above_load > cap.at_sla.load
    assert b.bound_text.startswith("TPOT P95 <= 8 ms:")
    assert b.violation and b.violation.startswith("TPOT P95")
    # The capacity load is below saturation and the text says how far.
    assert b.utilisation is not None and 0 < b.utilisation < 1
    assert "of saturation" in b.bound_text


@pytest.mark.unit
@pytest.mark.parametrize(
    ("config", "sla", "wl", "gpu", "driver"),
    [
        # Four slots against a cache that holds hundreds of sequences: the queue waits on slots.
        (EngineConfig(max_num_seqs=4), "chat", None, "h200-sxm", "max_num_seqs"),
        # 8k-token prompts cut into 512-token chunks: TTFT is many steps of prefill.
        (
            EngineConfig(max_num_batched_tokens=512),
            SLA(ttft_ms=300, tpot_ms=50),
            Workload(input_tokens=8000, output_tokens=64),
            "h200-sxm",
            "max_num_batched_tokens",
        ),
        # Sequences of 9k tokens in a 24 GB card after 16 GB of weights: preemptions.
        (
            EngineConfig(),
            SLA(),
            Workload(input_tokens=8000, output_tokens=1000),
            "rtx-4090",
            "kv-cache",
        ),
        # Plain chat on an H200: a decode step mostly reads the 16-bit weights.
        (EngineConfig(), "chat", None, "h200-sxm", "weight_reads"),
    ],
)
def test_the_driver_names_what_the_engine_is_short_of(
    config: EngineConfig, sla: SLA | str, wl: Workload | None, gpu: str, driver: str
) -> None:
    b = _binding(config, _ctx(load_sla(sla) if isinstance(sla, str) else sla, wl, gpu))
    assert b.driver == driver, b.text
    assert DRIVERS[driver] in b.driver_text and b.driver_text.endswith("simulator)")


@pytest.mark.unit
@settings(max_examples=20, deadline=None)
@given(
    config=_CONFIGS,
    batch=st.integers(1, 512),
    ctx_len=st.floats(1, 32_000),
)
def test_a_decode_steps_parts_add_up_to_the_step(
    config: EngineConfig, batch: int, ctx_len: float
) -> None:
    target = step_cost_model(load_model("llama-3.1-8b"), load_gpu("h200-sxm"), config)
    parts = target.decode_parts(batch, ctx_len)
    assert all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(target.decode_step_s(batch, ctx_len))


@pytest.mark.unit
def test_a_measured_search_keeps_its_own_bound_and_takes_the_evidence_from_the_simulator() -> None:
    ctx = _ctx(SLA(ttft_ms=2000, tpot_ms=8))
    cap, m = sim_capacity(EngineConfig(), ctx)
    measured = m.model_copy(update={"backend": "vllm", "preemptions": 99, "kv_utilization": 1.0})
    b = binding_for(EngineConfig(), ctx, cap, measured)
    assert b is not None and b.bound == "tpot"
    # The evidence is the simulator's at the capacity load, not the measured counters.
    assert b.preemptions == 0 and b.kv_peak < 0.5 and b.driver != "kv-cache"
    _, with_extra = evaluate_capacity(SimBackend(), EngineConfig(), ctx)
    assert with_extra.extra["binding"] == "tpot"
    assert with_extra.extra["binding_bound_text"] == b.bound_text


def test_a_tune_names_the_binding_limit_in_the_summary_best_yaml_and_both_csvs(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]
    args += ["--trials", "6", "--run-dir", str(run)]
    result = CliRunner().invoke(app, args, terminal_width=100)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    limit = next(i for i, ln in enumerate(lines) if ln.startswith("  binding limit: "))
    assert any(ln.startswith("    limited by ") for ln in lines[limit + 1 : limit + 4])
    assert all(len(ln) <= 100 for ln in lines[limit : limit + 5])
    best = yaml.safe_load((run / "best.yaml").read_text())["recommended"]["binding"]
    assert best["bound"] in ("ttft", "tpot", "saturation") and best["driver"] in DRIVERS
    assert best["why"].startswith("limited by ") and "mean_batch" in best["evidence"]
    for name in ("trials.csv", "pareto.csv"):
        rows = list(csv.DictReader((run / name).open()))
        done = [r for r in rows if r.get("state", "complete") == "complete"]
        assert done and all(r["binding"] and r["binding_evidence"] for r in done), name
