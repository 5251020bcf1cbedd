"""Issue 19 item 3: what the SLA costs, the pick's capacity as each SLA bound is scaled."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tuner.explain.sla_cost as sla_cost
from tuner.catalog import load_gpu, load_model, load_sla
from tuner.explain.sla_cost import (
    SLA_COST_COLUMNS,
    SLA_SCALES,
    SLACostPoint,
    read_sla_cost_csv,
    sla_cost_curve,
    sla_cost_text,
    write_sla_cost_csv,
)
from tuner.perf.load import LoadMode, ProbeBudget
from tuner.prices import GPUPrice, PriceTable
from tuner.specs import SLA, Context, EngineConfig, Workload

_NO_PRICES = PriceTable()
# Short requests, few of them: a capacity search in milliseconds, and both bounds can bind.
_QUICK = Workload(input_tokens=512, output_tokens=64, num_requests=64)


def _ctx(sla: SLA, gpu: str = "h200-sxm", workload: Workload | None = None) -> Context:
    return Context(
        model=load_model("llama-3.1-8b"),
        gpu=load_gpu(gpu),
        sla=sla,
        workload=workload or Workload(),
    )


def _price(usd: float) -> PriceTable:
    price = GPUPrice(
        usd_per_gpu_hour=usd,
        provider="test",
        source="https://example.com/p",
        checked=dt.date.today(),
    )
    return PriceTable(prices={"h200-sxm": price})


@pytest.mark.unit
def test_a_two_bound_sla_scales_each_bound_then_both_around_one_shared_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searches: list[SLA] = []
    real = sla_cost.evaluate_capacity

    def counted(backend: Any, config: EngineConfig, ctx: Context, **kw: Any) -> Any:
        searches.append(ctx.sla)
        return real(backend, config, ctx, **kw)

    monkeypatch.setattr(sla_cost, "evaluate_capacity", counted)
    points = sla_cost_curve(EngineConfig(), _ctx(SLA(ttft_ms=500, tpot_ms=12)), prices=_NO_PRICES)
    n = len(SLA_SCALES)
    assert [p.bound for p in points] == ["ttft"] * n + ["tpot"] * n + ["both"] * n
    # The SLA as asked is searched once and shared by the three bounds; no scaled SLA twice.
    assert len(searches) == 1 + 3 * (n - 1)
    assert len({(s.ttft_ms, s.tpot_ms) for s in searches}) == len(searches)
    ones = [p for p in points if p.scale == 1.0]
    assert len({p.capacity_rps_per_gpu for p in ones}) == 1
    assert all(p.cost_vs_sla == pytest.approx(1.0) for p in ones)
    tpot = {p.scale: p for p in points if p.bound == "tpot"}
    assert tpot[0.5].tpot_ms == 6 and tpot[0.5].ttft_ms == 500
    both = {p.scale: p for p in points if p.bound == "both"}
    assert (both[2.0].ttft_ms, both[2.0].tpot_ms) == (1000, 24)
    # TPOT 12 ms binds this variant: a stricter bound costs GPUs, a looser one saves them.
    assert tpot[0.75].capacity_rps_per_gpu < tpot[1.0].capacity_rps_per_gpu
    assert (tpot[0.75].cost_vs_sla or 0) > 1
    assert tpot[2.0].capacity_rps_per_gpu > tpot[1.0].capacity_rps_per_gpu
    assert all(p.usd_per_million_output_tokens is None for p in points)  # no price: no dollars
    lines = sla_cost_text(points)
    assert any("TPOT 3 ms (x0.25)" in line for line in lines)
    assert lines and all(len(line) <= 100 for line in lines)


@pytest.mark.unit
def test_a_throughput_only_sla_has_one_point() -> None:
    points = sla_cost_curve(EngineConfig(), _ctx(load_sla("batch")), prices=_NO_PRICES)
    assert len(points) == 1 and points[0].scale == 1.0
    assert points[0].ttft_ms is None and points[0].tpot_ms is None
    assert points[0].cost_vs_sla == pytest.approx(1.0)
    assert sla_cost_text(points) == []


@pytest.mark.unit
def test_a_bound_no_load_meets_has_no_gpus_cost_or_dollars() -> None:
    ctx = _ctx(SLA(ttft_ms=1000, tpot_ms=6), workload=_QUICK)
    points = sla_cost_curve(EngineConfig(), ctx, scales=(0.25, 1.0), prices=_price(3.6))
    tight = next(p for p in points if p.bound == "tpot" and p.scale == 0.25)
    assert tight.capacity_rps_per_gpu == 0.0
    assert tight.gpus_per_100_rps is None and tight.cost_vs_sla is None
    assert tight.usd_per_million_output_tokens is None
    assert any(
        "TPOT 1.5 ms (x0.25)" in ln and "no load meets it" in ln for ln in sla_cost_text(points)
    )


@pytest.mark.unit
def test_dollars_per_million_tokens_follow_the_price_and_the_csv_reads_back(tmp_path: Path) -> None:
    points = sla_cost_curve(
        EngineConfig(), _ctx(load_sla("chat")), scales=(0.5, 1.0), prices=_price(3.6)
    )
    for p in points:
        assert p.usd_per_million_output_tokens == pytest.approx(
            3.6 / (p.output_tok_s_per_gpu * 3600) * 1e6
        )
        assert p.gpus_per_100_rps is not None and p.gpus_per_100_rps * p.capacity_rps_per_gpu >= 100
        assert (p.gpus_per_100_rps - 1) * p.capacity_rps_per_gpu < 100  # the fewest that do
    path = tmp_path / "sla_cost.csv"
    write_sla_cost_csv(points, path)
    assert path.read_text().splitlines()[0] == ",".join(SLA_COST_COLUMNS)
    back = read_sla_cost_csv(path)
    assert [(p.bound, p.scale) for p in back] == [(p.bound, p.scale) for p in points]
    for a, b in zip(points, back, strict=True):
        assert b.capacity_rps_per_gpu == pytest.approx(a.capacity_rps_per_gpu, rel=1e-3)
        assert b.usd_per_million_output_tokens == pytest.approx(
            a.usd_per_million_output_tokens, rel=1e-3
        )


@pytest.mark.unit
def test_the_csv_keeps_missing_figures_as_empty_cells(tmp_path: Path) -> None:
    point = SLACostPoint(
        bound="tpot", scale=0.25, ttft_ms=None, tpot_ms=12.5, percentile=99,
        capacity_rps_per_gpu=0.0, output_tok_s_per_gpu=0.0, gpus_per_100_rps=None,
        cost_vs_sla=None, usd_per_million_output_tokens=None,
    )  # fmt: skip
    priced = point.model_copy(
        update={
            "scale": 1.0, "tpot_ms": 50.0, "capacity_rps_per_gpu": 12.3456789,
            "output_tok_s_per_gpu": 3160.4, "gpus_per_100_rps": 9, "cost_vs_sla": 1.0,
            "usd_per_million_output_tokens": 0.3165,
        }
    )  # fmt: skip
    path = tmp_path / "sla_cost.csv"
    write_sla_cost_csv([point, priced], path)
    assert path.read_text().splitlines()[1] == "tpot,0.25,,12.5,99,0,0,,,"
    assert read_sla_cost_csv(path)[0] == point
    again = read_sla_cost_csv(path)[1]
    assert again.capacity_rps_per_gpu == pytest.approx(12.35)  # four significant digits
    assert again.gpus_per_100_rps == 9 and again.percentile == 99


# A dozen SLA-cost curves (16 capacity searches each): a few seconds, so not a unit test.
@settings(max_examples=12, deadline=None)
@given(
    tpot=st.floats(4, 40),
    ttft=st.floats(50, 1500),
    quantization=st.sampled_from(["fp16", "fp8"]),
    mode=st.sampled_from(["rate", "users"]),
)
def test_loosening_an_sla_bound_never_lowers_capacity(
    tpot: float, ttft: float, quantization: str, mode: LoadMode
) -> None:
    ctx = _ctx(SLA(ttft_ms=ttft, tpot_ms=tpot), workload=_QUICK)
    config = EngineConfig(quantization=quantization)
    points = sla_cost_curve(config, ctx, mode, prices=_NO_PRICES)
    tol = ProbeBudget().rel_tol  # capacity is bisected to this tolerance
    for bound in ("ttft", "tpot", "both"):
        curve = sorted((p for p in points if p.bound == bound), key=lambda p: p.scale)
        assert [p.scale for p in curve] == sorted(SLA_SCALES)
        caps = [p.capacity_rps_per_gpu for p in curve]
        assert all(b >= a * (1 - tol) for a, b in zip(caps, caps[1:], strict=False)), (bound, caps)
        one = next(p for p in curve if p.scale == 1.0)
        if one.capacity_rps_per_gpu > 0:
            assert one.cost_vs_sla == pytest.approx(1.0)
