"""vLLM's per-position speculative counters read back as the conditional acceptance curve the
simulator uses (tuner.calibration_schema.AcceptanceCurve)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.backends import prometheus_text as prom
from tuner.backends.vllm_metrics import acceptance_per_position, server_counters

pytestmark = pytest.mark.unit


def _exposition(drafts: int, per_pos: list[int]) -> list[prom.Sample]:
    lines = [f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}.0']
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} '
              f"{n}.0" for i, n in enumerate(per_pos)]  # fmt: skip
    return prom.parse("\n".join(lines))


_RUNS = st.integers(min_value=1, max_value=6).flatmap(
    lambda k: st.tuples(st.just(k), st.lists(st.integers(0, k), min_size=1, max_size=200))
)


@given(_RUNS)
def test_the_curve_is_each_positions_acceptance_given_the_ones_before(
    case: tuple[int, list[int]],
) -> None:
    k, accepted_runs = case  # per draft: how many leading tokens the target accepted
    per_pos = [sum(run > i for run in accepted_runs) for i in range(k)]
    curve = acceptance_per_position(
        [], _exposition(len(accepted_runs), per_pos), len(accepted_runs)
    )
    assert len(curve) == k
    for i, rate in enumerate(curve):
        reached = [run for run in accepted_runs if run >= i]  # positions before i all accepted
        expected = sum(run > i for run in reached) / len(reached) if reached else 0.0
        assert abs(rate - expected) < 1e-12


def test_only_the_interval_counts_and_absent_counters_give_no_curve() -> None:
    before = _exposition(100, [90, 60, 30])
    after = _exposition(140, [126, 78, 30])  # 40 drafts: 36, 18, 0 accepted at positions 0-2
    assert acceptance_per_position(before, after, 40) == [0.9, 0.5, 0.0]
    out = server_counters(before, after)
    assert out["spec_acceptance_per_position"] == "0.9000,0.5000,0.0000"
    assert acceptance_per_position([], prom.parse("vllm:num_requests_running 1.0"), 10) == []
