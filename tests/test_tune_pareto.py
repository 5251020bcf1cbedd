"""Pareto analysis: dominance, hypervolume, knee, recommendation rule, no-feasible message."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tuner.search.pareto import (
    analyze,
    hypervolume,
    hypervolume_history,
    knee_index,
    no_feasible_message,
    non_dominated_mask,
    to_minimization,
)
from tuner.search.trials import TrialRecord
from tuner.sla import SLA_HEADROOM
from tuner.specs import SLA, EngineConfig, Metrics, Percentiles

pytestmark = pytest.mark.unit

points = st.integers(1, 3).flatmap(
    lambda d: arrays(
        np.float64, st.tuples(st.integers(1, 25), st.just(d)), elements=st.floats(0, 1, width=32)
    )
)


def _grid_hv(pts: np.ndarray, ref: np.ndarray) -> float:
    """Exact hypervolume by summing the cells of the grid the coordinates induce."""
    axes = [np.unique(np.append(pts[:, j], ref[j])) for j in range(pts.shape[1])]
    total = 0.0
    for cell in itertools.product(*(range(len(a) - 1) for a in axes)):
        lo = np.array([axes[j][i] for j, i in enumerate(cell)])
        hi = np.array([axes[j][i + 1] for j, i in enumerate(cell)])
        if np.any(np.all(pts <= lo, axis=1)):
            total += float(np.prod(hi - lo))
    return total


@settings(max_examples=80, deadline=None)
@given(points)
def test_non_dominated_points_are_not_dominated_and_others_are(pts: np.ndarray) -> None:
    mask = non_dominated_mask(pts)
    assert mask.any()
    for i, p in enumerate(pts):
        dominated = np.any(np.all(pts <= p, axis=1) & np.any(pts < p, axis=1))
        assert mask[i] == (not dominated)


@settings(max_examples=60, deadline=None)
@given(points)
def test_hypervolume_matches_grid_count_and_is_monotone(pts: np.ndarray) -> None:
    ref = np.full(pts.shape[1], 1.1)
    hv = hypervolume(pts, ref)
    assert abs(hv - _grid_hv(pts, ref)) < 1e-9
    history = hypervolume_history(pts, ref)
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(history))
    assert abs(history[-1] - hv) < 1e-9


def test_hypervolume_known_values() -> None:
    assert hypervolume(np.array([[0.0, 0.0]]), [1.0, 2.0]) == 2.0
    assert hypervolume(np.array([[0.5, 0.5], [0.0, 1.0]]), [1.0, 1.0]) == 0.25
    assert hypervolume(np.array([[2.0, 2.0]]), [1.0, 1.0]) == 0.0  # beyond the reference


def test_knee_is_the_balanced_point() -> None:
    front = np.array([[0.0, 1.0], [0.2, 0.2], [1.0, 0.0]])
    assert knee_index(front) == 1


def test_to_minimization_flips_maximised_columns() -> None:
    out = to_minimization(np.array([[1.0, 2.0, 3.0]]), [False, False, True])
    assert out.tolist() == [[1.0, 2.0, -3.0]]


def _p(v: float) -> Percentiles:
    return Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v)


def _rec(n: int, ttft: float, tpot: float, tput: float, tp: int = 1) -> TrialRecord:
    m = Metrics(ttft_ms=_p(ttft), tpot_ms=_p(tpot), output_tokens_per_s_per_gpu=tput)
    return TrialRecord(
        number=n,
        state="complete",
        params={},
        config=EngineConfig(tensor_parallel_size=tp),
        metrics=m,
    )


SLA_CHAT = SLA(name="chat", ttft_ms=500, tpot_ms=50, percentile=95)


def test_recommendation_prefers_headroom_over_raw_throughput() -> None:
    records = [
        _rec(0, 490, 49, 9000),  # meets, but within 10% of both bounds
        _rec(1, 300, 40, 7000),  # meets with headroom
        _rec(2, 600, 20, 12000),  # misses TTFT
        TrialRecord(number=3, state="pruned", params={}, reason="tp > gpus"),
    ]
    res = analyze(records, SLA_CHAT)
    assert res.feasible == [0, 1]
    assert res.recommended == 1 and res.headroom_met
    assert set(res.front) == {0, 1}
    assert res.front[0] == 0  # sorted by throughput descending
    assert 500 * (1 - SLA_HEADROOM) >= 300


def test_recommendation_without_headroom_is_flagged() -> None:
    res = analyze([_rec(0, 490, 49, 9000), _rec(1, 495, 30, 8000)], SLA_CHAT)
    assert res.recommended == 0 and not res.headroom_met


def test_nothing_feasible_names_closest_misses_and_recommends_nothing() -> None:
    oom = TrialRecord(
        number=2,
        state="complete",
        params={},
        config=EngineConfig(),
        metrics=Metrics.infeasible("KV cache out of memory", "sim"),
    )
    records = [_rec(0, 900, 40, 9000), _rec(1, 550, 60, 8000), oom]
    res = analyze(records, SLA_CHAT)
    assert res.recommended is None and res.front == [] and res.hypervolume == 0.0
    assert [m.number for m in res.closest] == [1, 0, 2]
    msg = no_feasible_message(res, SLA_CHAT, 3)
    assert "nothing is recommended" in msg
    assert "TTFT P95 550.0 ms > 500 ms (+10%)" in msg and "TPOT P95 60.0 ms > 50 ms (+20%)" in msg
    assert "could not run: KV cache out of memory" in msg


def test_throughput_only_sla_has_one_objective() -> None:
    batch = SLA(name="batch", percentile=95)
    res = analyze([_rec(0, 9000, 90, 100), _rec(1, 9000, 90, 300)], batch)
    assert res.objective_names == ["tput_per_gpu"]
    assert res.front == [1] and res.recommended == 1 and res.hypervolume == 300
