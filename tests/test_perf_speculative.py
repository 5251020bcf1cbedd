"""Speculative decoding: the expected-tokens formula and the batch-size crossover it must show."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner import catalog
from tuner.backends import get_backend
from tuner.perf.speculative import expected_tokens_per_step
from tuner.specs import SLA, Context, EngineConfig, Workload

pytestmark = pytest.mark.unit


@given(a=st.floats(0.0, 0.999), k=st.integers(1, 8))
def test_expected_tokens_is_the_geometric_sum(a: float, k: int) -> None:
    expected = sum(a**i for i in range(k + 1))
    assert expected_tokens_per_step(a, k) == pytest.approx(expected, rel=1e-9)
    assert 1.0 <= expected_tokens_per_step(a, k) <= k + 1


def test_expected_tokens_edge_cases() -> None:
    assert expected_tokens_per_step(0.7, 0) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)


def _ctx(concurrency: int, n: int) -> Context:
    return Context(
        model=catalog.load_model("llama-3.1-8b"),
        gpu=catalog.load_gpu("h100-sxm"),
        sla=SLA(),
        workload=Workload(
            input_tokens=512, output_tokens=256, concurrency=concurrency, num_requests=n,
            acceptance_rate=0.7,
        ),
    )  # fmt: skip


@pytest.mark.parametrize("draft", ["llama-3.2-1b", "ngram"])
def test_speculation_helps_at_batch_one_and_hurts_throughput_at_large_batch(draft: str) -> None:
    sim = get_backend("sim")
    plain = EngineConfig(max_num_seqs=512)
    spec = EngineConfig(max_num_seqs=512, num_speculative_tokens=4, draft_model=draft)
    one = _ctx(1, 3)
    assert sim.evaluate(spec, one).tpot_ms.mean < 0.8 * sim.evaluate(plain, one).tpot_ms.mean
    many = _ctx(512, 1024)
    spec_many, plain_many = sim.evaluate(spec, many), sim.evaluate(plain, many)
    assert spec_many.feasible and plain_many.feasible
    if draft != "ngram":
        assert spec_many.output_tokens_per_s < plain_many.output_tokens_per_s
    else:
        # A free proposer still pays (k+1)x verify FLOPs: its gain shrinks with batch size.
        gain_one = sim.evaluate(plain, one).tpot_ms.mean / sim.evaluate(spec, one).tpot_ms.mean
        gain_many = spec_many.output_tokens_per_s / plain_many.output_tokens_per_s
        assert gain_many < gain_one


def test_draft_weights_and_cache_take_memory() -> None:
    sim = get_backend("sim")
    ctx = _ctx(1, 2)
    plain = sim.evaluate(EngineConfig(), ctx)
    spec = sim.evaluate(EngineConfig(num_speculative_tokens=3, draft_model="llama-3.2-1b"), ctx)
    assert spec.weights_gib > plain.weights_gib + 2.0  # 1.24 B bf16 parameters
    assert spec.kv_capacity_tokens < plain.kv_capacity_tokens
    assert spec.extra["tokens_per_step"] == pytest.approx(expected_tokens_per_step(0.7, 3))
