"""Scheduler simulation: closed-form runs equal step-by-step; invariants, preemption, seeds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner import catalog
from tuner.perf.costs import step_cost_model
from tuner.perf.memory import plan_memory
from tuner.perf.scheduler import SchedulerLimits, make_requests, simulate
from tuner.perf.speculative import Speculation, step_coeffs
from tuner.perf.summary import summarize
from tuner.specs import SLA, EngineConfig, Workload

pytestmark = pytest.mark.unit

MODEL = catalog.load_model("llama-3.1-8b")
GPU = catalog.load_gpu("h200-sxm")
COST = step_cost_model(MODEL, GPU, EngineConfig())
PLAN = plan_memory(MODEL, GPU, EngineConfig(), Workload())


def _limits(**kw: object) -> SchedulerLimits:
    base: dict[str, object] = {
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "kv_capacity_blocks": PLAN.kv_capacity_blocks,
    }
    base.update(kw)
    return SchedulerLimits(**base)  # type: ignore[arg-type]


def test_single_request_timeline_matches_the_step_costs_exactly() -> None:
    prompt, out = 700, 50
    res = simulate(make_requests(1, prompt, out), _limits(), COST)
    const, _ = step_coeffs(COST, None, 0, prompt, 1)
    prefill_s = const + COST.prefill_attn_s(prompt, 0)
    a, c = step_coeffs(COST, None, 1, 0, 0)
    decode_s = sum(a + c * (prompt + j) for j in range(out - 1))
    assert res.first_token_s[0] == pytest.approx(prefill_s, rel=1e-12)
    assert res.finish_s[0] == pytest.approx(prefill_s + decode_s, rel=1e-9)
    itl, weight = res.itl_samples()
    assert weight.sum() == out - 1
    assert float((itl * weight).sum()) == pytest.approx(decode_s, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=40),
    isl=st.integers(min_value=1, max_value=3000),
    osl=st.integers(min_value=1, max_value=300),
    spread=st.sampled_from([0.0, 0.5, 0.9]),
    users=st.integers(min_value=1, max_value=16),
    rate=st.sampled_from([None, 2.0, 50.0]),
    max_seqs=st.sampled_from([2, 8, 256]),
    budget=st.sampled_from([512, 2048, 8192]),
    kv_blocks=st.sampled_from([400, 2000, 100_000]),
    chunked=st.booleans(),
    mixed=st.booleans(),
    wait=st.sampled_from([(0, 0), (5, 3000), (40, 10**6)]),
    seed=st.integers(0, 3),
)
def test_closed_form_runs_equal_step_by_step_simulation(
    n: int,
    isl: int,
    osl: int,
    spread: float,
    users: int,
    rate: float | None,
    max_seqs: int,
    budget: int,
    kv_blocks: int,
    chunked: bool,
    mixed: bool,
    wait: tuple[int, int],
    seed: int,
) -> None:
    reqs = make_requests(n, isl, osl, length_spread=spread, rate_rps=rate, users=users, seed=seed)
    longest = int((reqs.prompt_tokens + reqs.output_tokens).max())
    lim = _limits(
        max_num_seqs=max_seqs,
        max_num_batched_tokens=budget,
        kv_capacity_blocks=max(kv_blocks, longest // 16 + 2),
        enable_chunked_prefill=chunked,
        mix_prefill_decode=mixed,
        batch_wait_iters=wait[0],
        batch_wait_tokens=wait[1],
    )
    fast = simulate(reqs, lim, COST)
    slow = simulate(reqs, lim, COST, max_run_steps=1)
    for name in ("first_token_s", "finish_s", "scheduled_s"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9, atol=1e-12)
    assert fast.num_steps == slow.num_steps
    assert fast.preemptions == slow.preemptions
    fv, fw = fast.itl_samples()
    sv, sw = slow.itl_samples()
    assert fw.sum() == sw.sum()
    assert float((fv * fw).sum()) == pytest.approx(float((sv * sw).sum()), rel=1e-9)
    # every request finished, in order of its own events
    assert np.all(np.isfinite(fast.finish_s))
    assert np.all(fast.arrival_s <= fast.scheduled_s)
    assert np.all(fast.scheduled_s < fast.first_token_s)
    assert np.all(fast.first_token_s <= fast.finish_s)


@settings(max_examples=25, deadline=None)
@given(
    users=st.integers(min_value=1, max_value=64),
    isl=st.integers(min_value=16, max_value=2048),
    osl=st.integers(min_value=2, max_value=256),
    spread=st.sampled_from([0.0, 0.3]),
    rate=st.sampled_from([None, 5.0]),
)
def test_ttft_percentiles_cover_queue_time_and_throughput_is_bounded_by_tpot(
    users: int, isl: int, osl: int, spread: float, rate: float | None
) -> None:
    reqs = make_requests(3 * users, isl, osl, length_spread=spread, rate_rps=rate, users=users)
    res = simulate(reqs, _limits(), COST)
    m = summarize(res, PLAN, SLA(), num_gpus=1)
    for p in (50, 90, 95, 99):
        assert m.ttft_ms.at(p) >= m.queue_ms.at(p)
    if rate is None and spread == 0.0:
        out = res.output_tokens
        tpot_s = (res.finish_s - res.first_token_s) / (out - 1)
        # Each user's requests run back to back, each needs at least (osl - 1) x TPOT.
        bound = users * osl / ((osl - 1) * tpot_s.min())
        assert m.output_tokens_per_s <= bound * (1 + 1e-9)


def test_kv_exhaustion_preempts_and_every_request_still_completes() -> None:
    reqs = make_requests(64, 1000, 500, users=64)
    tight = _limits(kv_capacity_blocks=64 * 1000 // 16)  # prompts fit, their outputs do not
    res = simulate(reqs, tight, COST)
    assert res.preemptions > 0
    assert np.all(np.isfinite(res.finish_s))
    assert res.kv_peak_fraction <= 1.0 + 1e-9
    roomy = simulate(reqs, _limits(), COST)
    assert roomy.preemptions == 0
    assert res.finish_s.max() > roomy.finish_s.max()  # recompute costs time


def test_prefix_cache_hits_cut_prefill_work_and_ttft() -> None:
    reqs = make_requests(50, 4000, 32, rate_rps=4.0)
    cold = simulate(reqs, _limits(), COST)
    warm = simulate(reqs, _limits(prefix_cache_hit=0.75), COST)
    assert warm.prefill_tokens_computed < 0.5 * cold.prefill_tokens_computed
    assert np.median(warm.first_token_s - warm.arrival_s) < np.median(
        cold.first_token_s - cold.arrival_s
    )


def test_prefill_first_engine_stalls_decodes_behind_a_burst_of_prefills() -> None:
    # 32 users sent at once with 2048-token prompts: 8 prefill steps of 8192 tokens.
    reqs = make_requests(32, 2048, 64, users=32)
    mixed = simulate(reqs, _limits(), COST)
    first = simulate(reqs, _limits(mix_prefill_decode=False), COST)
    # Prefill-first: nobody decodes until every prompt is in, so the burst decodes and
    # finishes in lock-step; mixed steps let early prompts start decoding, spreading finishes.
    assert np.ptp(first.finish_s) < 1e-9 < np.ptp(mixed.finish_s)
    # Steps carry only prefill, so first tokens come no later; the first-served request's
    # wait for the rest of the burst lands in its time per output token instead.
    assert np.all(first.first_token_s <= mixed.first_token_s * (1 + 1e-9))
    tpot = lambda r: (r.finish_s[0] - r.first_token_s[0]) / 63  # noqa: E731
    assert tpot(first) > tpot(mixed)
    assert first.prefill_tokens_computed == mixed.prefill_tokens_computed


def test_unchunked_prompts_in_a_mixing_engine_share_steps_with_decodes() -> None:
    # 4 users at once, 2000-token prompts, a 2048-token budget without chunking: one whole
    # prompt per step. vLLM V1 schedules the running decodes first and the next prompt in the
    # rest of the budget; an engine that does not mix stalls the decodes instead.
    reqs = make_requests(4, 2000, 64, users=4)
    lim = {"max_num_batched_tokens": 2048, "enable_chunked_prefill": False}
    mixed = simulate(reqs, _limits(**lim), COST)
    stalled = simulate(reqs, _limits(**lim, mix_prefill_decode=False), COST)
    assert np.all(np.diff(mixed.first_token_s) > 0)  # one prompt per step
    # Mixed: request 0 decodes during the other prefills and finishes first; stalled: nobody
    # decodes until every prompt is in, so all four finish in the same step.
    assert np.ptp(stalled.finish_s) < 1e-9 < np.ptp(mixed.finish_s)
    assert mixed.finish_s[0] < stalled.finish_s[0]
    # A prompt that does not fit beside the decodes waits for them (budget 2040 + 9 > 2048).
    tight = make_requests(10, 2040, 8, users=10)
    res = simulate(tight, _limits(**lim), COST)
    assert np.all(np.isfinite(res.finish_s))
    assert res.prefill_tokens_computed == 10 * 2040


def test_batch_waiting_holds_new_prompts_while_others_decode() -> None:
    # TensorRT-LLM batch waiting: 4 users, 1000-token prompts, 16384-token budget unchunked.
    reqs = make_requests(40, 1000, 200, users=4, length_spread=0.2, seed=1)
    lim = {"max_num_batched_tokens": 16384, "enable_chunked_prefill": False}
    plain = simulate(reqs, _limits(**lim), COST)
    waiting = simulate(reqs, _limits(**lim, batch_wait_iters=20, batch_wait_tokens=14745), COST)
    ttft = lambda r: r.first_token_s - r.arrival_s  # noqa: E731
    # The first burst meets no decodes and is not held; later prompts wait for up to 20 steps.
    np.testing.assert_allclose(ttft(waiting)[:4], ttft(plain)[:4], rtol=1e-12)
    a, c = step_coeffs(COST, None, 3, 0, 0)
    longest_hold = 20 * (a + c * 3 * 1200) + ttft(plain).max()
    assert ttft(waiting).mean() > ttft(plain).mean() and ttft(waiting).max() <= longest_hold
    # A threshold the first waiting prompt already reaches never holds anything.
    never = simulate(reqs, _limits(**lim, batch_wait_iters=20, batch_wait_tokens=1), COST)
    np.testing.assert_allclose(never.first_token_s, plain.first_token_s, rtol=1e-12)


def test_same_seed_same_result_and_different_seed_differs() -> None:
    def run(seed: int) -> np.ndarray:
        reqs = make_requests(80, 512, 128, length_spread=0.5, rate_rps=10.0, seed=seed)
        return simulate(reqs, _limits(), COST).finish_s

    np.testing.assert_array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


def test_max_num_seqs_limits_the_batch() -> None:
    reqs = make_requests(32, 128, 64, users=32)
    capped = simulate(reqs, _limits(max_num_seqs=4), COST)
    _, weight = capped.itl_samples()
    assert weight.max() <= 4
    free = simulate(reqs, _limits(), COST)
    assert capped.finish_s.max() > free.finish_s.max()


def test_speculation_advances_several_tokens_per_step() -> None:
    spec = Speculation(num_spec_tokens=4, acceptance=0.8, draft=None)
    reqs = make_requests(1, 128, 200)
    plain = simulate(reqs, _limits(), COST)
    fast = simulate(reqs, _limits(), COST, spec)
    assert fast.num_steps < plain.num_steps / 2
    assert fast.finish_s[0] < plain.finish_s[0]
