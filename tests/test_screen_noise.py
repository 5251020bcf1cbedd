"""Honest noise (issue 34, item 4): a candidate beats the engine defaults only when its measured
capacity interval lies above the defaults'; otherwise the summary says so and the defaults stay."""

from __future__ import annotations

import pytest

from tuner.perf.load import Capacity, CapacitySpread, LoadPoint
from tuner.screen.noise import capacity_interval, within_noise
from tuner.screen.variant import ConfirmedVariant, Side
from tuner.specs import EngineConfig, Percentiles

pytestmark = pytest.mark.unit


def _variant(role: str, load: float, low: float, high: float | None) -> ConfirmedVariant:
    """A measured variant of capacity `load` req/s (64 output tokens each) bounded by low-high."""
    pct = Percentiles(mean=50, p50=50, p90=50, p95=50, p99=50)
    point = LoadPoint(
        load=load,
        requests_per_s_per_gpu=load,
        output_tokens_per_s_per_gpu=64 * load,
        ttft_ms=pct,
        tpot_ms=pct,
        meets_sla=True,
        meets_headroom=True,
    )
    spread = CapacitySpread(low_load=low, high_load=high, repeats=2)
    side = Side(
        capacity_load=load,
        capacity_rps_per_gpu=load,
        capacity_tok_s_per_gpu=64 * load,
        ttft_ms=50,
        tpot_ms=5,
    )
    return ConfirmedVariant(
        role=role,  # type: ignore[arg-type]
        predicted_rank=None if role == "baseline" else 3,
        screen_trial=None,
        config=EngineConfig(),
        status="measured",
        measured=side,
        capacity=Capacity(mode="rate", points=[point], spread=spread),
    )


def test_interval_is_the_spread_in_output_tokens() -> None:
    v = _variant("baseline", 4.0, 3.5, 4.5)
    assert capacity_interval(v) == pytest.approx((64 * 3.5, 64 * 4.5))
    assert capacity_interval(_variant("baseline", 4.0, 4.0, None)) == (256.0, None)


def test_a_gain_inside_the_spreads_keeps_the_defaults() -> None:
    # Issue 34's case: +48% on one probe each, with a noisy defaults' bracket 2.75-5.75 req/s.
    base = _variant("baseline", 2.75, 2.75, 5.75)
    pick = _variant("candidate", 4.06, 3.5, 4.25)
    why = within_noise(pick, base)
    assert why is not None and "rank 3 measured +48%" in why and "defaults are kept" in why


def test_a_gain_beyond_both_spreads_is_a_gain() -> None:
    base = _variant("baseline", 2.75, 2.7, 2.9)
    pick = _variant("candidate", 4.06, 4.0, 4.2)
    assert within_noise(pick, base) is None


def test_defaults_never_seen_to_miss_cannot_be_beaten() -> None:
    base = _variant("baseline", 2.75, 2.75, None)  # budget ended before a load missed
    pick = _variant("candidate", 4.06, 4.0, 4.2)
    assert within_noise(pick, base) is not None


def test_no_spread_no_verdict() -> None:
    base = _variant("baseline", 2.75, 2.7, 2.9)
    pick = _variant("candidate", 4.06, 4.0, 4.2)
    assert pick.capacity is not None
    pick.capacity.spread = None  # a backend without repeated probes (the torch engine)
    assert within_noise(pick, base) is None
    assert within_noise(base, base) is None and within_noise(None, base) is None
