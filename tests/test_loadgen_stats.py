"""bench_stats: vLLM `bench serve` aggregation on known per-request timings (no server)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.bench.stats import (
    RequestResult,
    aggregate,
    aggregate_steady,
    peak_decoding,
    summarize_failures,
)
from tuner.metrics import percentiles_ms
from tuner.specs import SLA

pytestmark = pytest.mark.unit


def _ok(ttft_s: float, gaps_s: list[float], tokens: int | None = None) -> RequestResult:
    n = tokens if tokens is not None else len(gaps_s) + 1
    return RequestResult(
        success=True,
        input_tokens=10,
        output_tokens=n,
        requested_output_tokens=n,
        ttft_s=ttft_s,
        itl_s=list(gaps_s),
        e2e_s=ttft_s + sum(gaps_s),
    )


def test_known_timings_give_vllm_definitions() -> None:
    a = _ok(0.100, [0.010] * 9)  # 10 tokens, one per chunk
    b = _ok(0.300, [0.030] * 4, tokens=10)  # 10 tokens in 5 chunks (speculative: 2 per chunk)
    m = aggregate([a, b], duration_s=2.0, backend="test")
    assert m.ttft_ms.mean == pytest.approx(200.0)
    assert m.ttft_ms.p50 == pytest.approx(200.0)  # numpy linear interpolation between 100, 300
    # TPOT = (E2E - TTFT) / (tokens - 1): a 90/9 = 10 ms, b 120/9 = 13.33 ms
    assert m.tpot_ms.mean == pytest.approx((10.0 + 120.0 / 9) / 2)
    # ITL pools chunk gaps: nine of 10 ms and four of 30 ms
    assert m.itl_ms.mean == pytest.approx((9 * 10 + 4 * 30) / 13)
    assert m.itl_ms.p50 == pytest.approx(10.0)
    assert m.e2e_ms.p99 == pytest.approx(float(np.percentile([190.0, 420.0], 99)))
    assert m.output_tokens_per_s == pytest.approx(20 / 2.0)
    assert m.total_tokens_per_s == pytest.approx(40 / 2.0)
    assert m.requests_per_s == pytest.approx(1.0)
    assert m.feasible and m.backend == "test" and m.failed_requests == 0


def test_failures_are_counted_with_reasons_and_add_no_tokens() -> None:
    bad = [RequestResult(error="timeout after 5 s"), RequestResult(error="HTTP 500: boom")]
    bad.append(RequestResult(error="timeout after 5 s"))
    m = aggregate([_ok(0.1, [0.01] * 3), *bad], duration_s=1.0, backend="t")
    assert m.num_requests == 4 and m.failed_requests == 3
    assert m.extra["failure_reasons"] == "timeout after 5 s x2; HTTP 500: boom x1"
    assert m.output_tokens_per_s == pytest.approx(4.0)
    assert m.feasible  # one success: the caller decides whether failures disqualify


def test_all_failed_is_infeasible_with_the_reason() -> None:
    m = aggregate([RequestResult(error="cannot connect")], duration_s=1.0, backend="t")
    assert not m.feasible and "cannot connect" in (m.reason or "")


def test_goodput_counts_requests_meeting_every_slo() -> None:
    fast = _ok(0.05, [0.01] * 4)
    slow_first = _ok(0.50, [0.01] * 4)
    slow_decode = _ok(0.05, [0.10] * 4)
    one_token = _ok(0.05, [], tokens=1)  # TPOT counts as 0 for goodput, as in vLLM
    m = aggregate(
        [fast, slow_first, slow_decode, one_token],
        duration_s=2.0,
        backend="t",
        sla=SLA(ttft_ms=100, tpot_ms=50),
    )
    assert m.goodput_rps == pytest.approx(2 / 2.0)
    assert m.tpot_ms.mean == pytest.approx((10 + 10 + 100) / 3)  # one-token request excluded


def test_output_length_mismatches_are_reported() -> None:
    short = _ok(0.1, [0.01] * 3)
    short.requested_output_tokens = 8
    m = aggregate([short, _ok(0.1, [0.01])], duration_s=1.0, backend="t")
    assert m.extra["output_length_mismatches"] == 1


def test_summarize_failures_is_empty_without_failures() -> None:
    assert summarize_failures([_ok(0.1, [])]) == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=50))
def test_percentiles_are_ordered_and_bounded(values_s: list[float]) -> None:
    p = percentiles_ms(values_s)
    lo, hi = min(values_s) * 1000, max(values_s) * 1000
    assert lo - 1e-6 <= p.p50 <= p.p90 <= p.p95 <= p.p99 <= hi + 1e-6
    assert lo - 1e-6 <= p.mean <= hi + 1e-6


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=1e-3, max_value=2.0),
            st.lists(st.floats(min_value=1e-4, max_value=0.5), max_size=20),
        ),
        min_size=1,
        max_size=20,
    ),
    st.floats(min_value=0.1, max_value=100.0),
)
def test_aggregate_invariants(requests: list[tuple[float, list[float]]], duration_s: float) -> None:
    results = [_ok(ttft, gaps) for ttft, gaps in requests]
    m = aggregate(results, duration_s=duration_s, backend="t", sla=SLA(ttft_ms=1e9, tpot_ms=1e9))
    assert m.ttft_ms.p50 <= m.e2e_ms.p99 + 1e-6  # the first token never comes after the last
    assert m.goodput_rps == pytest.approx(m.requests_per_s)  # unbounded SLA: every request good
    tokens = sum(r.output_tokens for r in results)
    assert m.output_tokens_per_s * duration_s == pytest.approx(tokens)
    # ITL pools every gap of every request
    gaps = [g for _, gs in requests for g in gs]
    if gaps:
        assert m.itl_ms.mean == pytest.approx(np.mean(gaps) * 1000)


def _at(start_s: float, ttft_s: float, e2e_s: float, ok: bool = True) -> RequestResult:
    return RequestResult(success=ok, output_tokens=8, requested_output_tokens=8, ttft_s=ttft_s,
                         e2e_s=e2e_s, start_s=start_s)  # fmt: skip


def test_peak_decoding_counts_overlapping_streams_only() -> None:
    # a streams 0.1..1.0, b 0.5..1.5, c 1.0..2.0 (starts as a ends: no overlap), d failed
    results = [_at(0.0, 0.1, 1.0), _at(0.4, 0.1, 1.1), _at(0.9, 0.1, 1.1),
               _at(0.0, 0.1, 5.0, ok=False)]  # fmt: skip
    assert peak_decoding(results) == 2
    assert peak_decoding([]) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 1), st.floats(0, 3)), max_size=30))
def test_peak_decoding_is_bounded_by_the_request_count(
    spans: list[tuple[float, float, float]],
) -> None:
    results = [_at(s, t, t + d) for s, t, d in spans]
    peak = peak_decoding(results)
    assert 0 <= peak <= len(results)
    assert (peak >= 1) == any(s + (t + d) > s + t for s, t, d in spans)
    # steady aggregation reports it over the whole load, warm-up included
    if results:
        assert aggregate_steady(results, 1, backend="t").extra["client_peak_decoding"] == peak
