"""Issue 19 item 4: capacity is ranked by steady-state served throughput, not the window's."""

from __future__ import annotations

import pytest

from tuner.catalog import load_gpu, load_model, load_sla
from tuner.perf.capacity import sim_capacity
from tuner.perf.load import Capacity, LoadPoint
from tuner.search.frontier import ranked_by_capacity, recommend_capacity
from tuner.search.trials import TrialRecord
from tuner.specs import SLA, Context, EngineConfig, Metrics, Percentiles, Workload

pytestmark = pytest.mark.unit


def _flat(v: float) -> Percentiles:
    return Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v)


def _point(rps: float, tok_s: float, window: float | None = None) -> LoadPoint:
    return LoadPoint(
        load=rps,
        requests_per_s_per_gpu=rps,
        output_tokens_per_s_per_gpu=tok_s,
        window_output_tokens_per_s_per_gpu=window,
        ttft_ms=_flat(100.0),
        tpot_ms=_flat(10.0),
        meets_sla=True,
        meets_headroom=True,
    )


def _record(number: int, point: LoadPoint) -> TrialRecord:
    cap = Capacity(mode="rate", points=[point], probes=1)
    return TrialRecord(
        number=number,
        state="complete",
        params={},
        config=EngineConfig(),
        metrics=Metrics(),
        capacity=cap,
    )


def test_the_variant_serving_more_requests_ranks_first_whatever_its_window_tok_s() -> None:
    # Trial 0's window drained faster (more window tok/s) at a lower served rate: it loses.
    fast_tail = _record(0, _point(rps=30.0, tok_s=30.0 * 200, window=9000.0))
    more_served = _record(1, _point(rps=35.0, tok_s=35.0 * 200, window=7000.0))
    ranked = ranked_by_capacity([fast_tail, more_served], SLA(ttft_ms=500, tpot_ms=50))
    assert [r.number for r in ranked] == [1, 0]
    assert recommend_capacity([fast_tail, more_served], SLA(ttft_ms=500, tpot_ms=50)) == (1, True)


def test_sim_capacity_tok_s_is_served_rate_times_mean_output_and_keeps_the_window_figure() -> None:
    ctx = Context(
        model=load_model("llama-3.1-8b"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla("chat"),
        workload=Workload(),
    )
    cap, at_sla = sim_capacity(EngineConfig(), ctx, operating_point=False)
    top = cap.at_sla
    assert top is not None and top.window_output_tokens_per_s_per_gpu is not None
    mean_output = at_sla.output_tokens_per_s / at_sla.requests_per_s
    assert top.output_tokens_per_s_per_gpu == pytest.approx(
        top.requests_per_s_per_gpu * mean_output, rel=1e-9
    )
    assert cap.tok_s_per_gpu == top.output_tokens_per_s_per_gpu


def test_a_capacity_written_before_the_window_figure_loads_and_rewrites_unchanged() -> None:
    old = _point(rps=2.0, tok_s=400.0).model_dump(mode="json")
    assert "window_output_tokens_per_s_per_gpu" not in old
    assert LoadPoint.model_validate(old).model_dump(mode="json") == old
