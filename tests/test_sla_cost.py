"""Issue 19 item 3: what the SLA costs, the pick's capacity as each SLA bound is scaled."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.catalog import load_gpu, load_model, load_sla
from tuner.explain.sla_cost import (
    SLA_SCALES,
    read_sla_cost_csv,
    sla_cost_curve,
    sla_cost_text,
    write_sla_cost_csv,
)
from tuner.perf.capacity import max_rate_meeting_sla
from tuner.perf.load import ProbeBudget
from tuner.plan.prices import GPUPrice, PriceTable
from tuner.specs import SLA, Context, EngineConfig, Workload

pytestmark = pytest.mark.unit
_NO_PRICES = PriceTable()


def _ctx(sla: SLA, gpu: str = "h200-sxm") -> Context:
    return Context(
        model=load_model("llama-3.1-8b"), gpu=load_gpu(gpu), sla=sla, workload=Workload()
    )


def test_a_two_bound_sla_scales_each_bound_then_both_around_one_shared_point() -> None:
    points = sla_cost_curve(EngineConfig(), _ctx(SLA(ttft_ms=500, tpot_ms=12)), prices=_NO_PRICES)
    n = len(SLA_SCALES)
    assert [p.bound for p in points] == ["ttft"] * n + ["tpot"] * n + ["both"] * n
    ones = [p for p in points if p.scale == 1.0]
    assert len({p.capacity_rps_per_gpu for p in ones}) == 1
    assert all(p.cost_vs_sla == pytest.approx(1.0) for p in ones)
    tpot = {p.scale: p for p in points if p.bound == "tpot"}
    assert tpot[0.5].tpot_ms == 6 and tpot[0.5].ttft_ms == 500
    # TPOT 12 ms binds this variant: a stricter bound costs GPUs, a looser one saves them.
    assert tpot[0.75].capacity_rps_per_gpu < tpot[1.0].capacity_rps_per_gpu
    assert (tpot[0.75].cost_vs_sla or 0) > 1
    assert tpot[2.0].capacity_rps_per_gpu > tpot[1.0].capacity_rps_per_gpu
    assert all(p.usd_per_million_output_tokens is None for p in points)  # no price: no dollars
    assert any("TPOT 3 ms (x0.25)" in line for line in sla_cost_text(points))


def test_a_throughput_only_sla_has_one_point() -> None:
    points = sla_cost_curve(EngineConfig(), _ctx(load_sla("batch")), prices=_NO_PRICES)
    assert len(points) == 1 and points[0].scale == 1.0
    assert sla_cost_text(points) == []


def test_dollars_per_million_tokens_follow_the_price_and_the_csv_reads_back(tmp_path: Path) -> None:
    price = GPUPrice(
        usd_per_gpu_hour=3.6,
        provider="test",
        source="https://example.com/p",
        checked=dt.date.today(),
    )
    table = PriceTable(prices={"h200-sxm": price})
    points = sla_cost_curve(EngineConfig(), _ctx(load_sla("chat")), scales=(0.5, 1.0), prices=table)
    for p in points:
        assert p.usd_per_million_output_tokens == pytest.approx(
            3.6 / (p.output_tok_s_per_gpu * 3600) * 1e6
        )
        assert p.gpus_per_100_rps is not None and p.gpus_per_100_rps * p.capacity_rps_per_gpu >= 100
    path = tmp_path / "sla_cost.csv"
    write_sla_cost_csv(points, path)
    back = read_sla_cost_csv(path)
    assert [(p.bound, p.scale) for p in back] == [(p.bound, p.scale) for p in points]
    for a, b in zip(points, back, strict=True):
        assert b.capacity_rps_per_gpu == pytest.approx(a.capacity_rps_per_gpu, rel=1e-3)


@settings(max_examples=10, deadline=None)
@given(
    tpot=st.floats(6, 60),
    ttft=st.floats(100, 2000),
    looser=st.floats(1.0, 3.0),
    quantization=st.sampled_from(["fp16", "fp8"]),
)
def test_loosening_an_sla_bound_never_lowers_capacity(
    tpot: float, ttft: float, looser: float, quantization: str
) -> None:
    config = EngineConfig(quantization=quantization)
    tol = ProbeBudget().rel_tol  # capacity is bisected to this tolerance
    base = max_rate_meeting_sla(config, _ctx(SLA(ttft_ms=ttft, tpot_ms=tpot)))
    for loose in (
        SLA(ttft_ms=ttft * looser, tpot_ms=tpot),
        SLA(ttft_ms=ttft, tpot_ms=tpot * looser),
    ):
        assert max_rate_meeting_sla(config, _ctx(loose)) >= base * (1 - tol)
