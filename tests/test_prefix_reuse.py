"""Prefix reuse that emerges: the simulator's KV cache by block hash, LRU of unreferenced ones."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner import catalog
from tuner.bench.trace import BlockHashes
from tuner.cli import app
from tuner.perf.capacity import max_rate_meeting_sla
from tuner.perf.costs import step_cost_model
from tuner.perf.load import ProbeBudget
from tuner.perf.memory import plan_memory
from tuner.perf.prefix_cache import PrefixCache
from tuner.perf.prefix_sim import CachingEngineSim, make_sim, prefix_metrics
from tuner.perf.scheduler import RequestSet, SchedulerLimits, SimResult, simulate
from tuner.perf.sim_engine import EngineSim
from tuner.request import build_request
from tuner.specs import EngineConfig, Workload

pytestmark = pytest.mark.unit

MODEL = catalog.load_model("llama-3.1-8b")
GPU = catalog.load_gpu("h200-sxm")
COST = step_cost_model(MODEL, GPU, EngineConfig())
PLAN = plan_memory(MODEL, GPU, EngineConfig(), Workload())
SAMPLE = Path(__file__).resolve().parents[1] / "benchmarks/data/traces/sessions_sample.jsonl"
runner = CliRunner()


def test_cache_hits_leading_blocks_and_evicts_the_least_recent_unreferenced() -> None:
    cache = PrefixCache()
    cache.acquire([1, 2, 3])
    assert cache.match([1, 2, 9, 3]) == 2
    cache.release([1, 2, 3])  # freed tail first: 3 is the least recently used
    cache.acquire([1, 7])
    cache.release([1, 7])
    cache.trim(3)
    assert cache.evictions == 1 and cache.match([2]) == 1 and cache.match([3]) == 0
    cache.acquire([2])  # held by a running sequence: never evicted
    cache.trim(0)
    assert cache.match([2]) == 1 and cache.match([1]) == 0 and len(cache) == 1


def _requests(ids: list[list[int]], prompt: int, out: int = 20, gap_s: float = 1.0) -> RequestSet:
    flat = np.asarray([h for row in ids for h in row], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in ids]))).astype(np.int64)
    n = len(ids)
    return RequestSet(
        np.full(n, prompt, dtype=np.int64),
        np.full(n, out, dtype=np.int64),
        np.arange(n, dtype=np.float64) * gap_s,
        blocks=BlockHashes(flat, offsets, 512),
    )


def _limits(caching: bool, blocks: int | None = None) -> SchedulerLimits:
    return SchedulerLimits(
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        kv_capacity_blocks=blocks or PLAN.kv_capacity_blocks,
        prefix_caching=caching,
    )


def test_a_repeated_prefix_is_computed_once() -> None:
    # Four prompts of 2048 tokens sharing their first three 512-token blocks.
    reqs = _requests([[0, 1, 2, 10 + i] for i in range(4)], prompt=2048)
    on = simulate(reqs, _limits(True), COST)
    off = simulate(reqs, _limits(False), COST)
    assert off.prefill_tokens_computed == 4 * 2048
    assert on.prefill_tokens_computed == 2048 + 3 * 512
    assert on.prefix_hit_tokens == 3 * 1536 and on.prefix_query_tokens == 4 * 2048
    assert prefix_metrics(on)["prefix_cache_hit_rate"] == pytest.approx(3 * 1536 / (4 * 2048))
    assert prefix_metrics(off) == {}
    ttft_on = on.first_token_s[1:] - on.arrival_s[1:]
    ttft_off = off.first_token_s[1:] - off.arrival_s[1:]
    assert np.all(ttft_on < ttft_off)


def test_an_identical_prompt_still_computes_its_last_token() -> None:
    reqs = _requests([[5, 6], [5, 6]], prompt=1024)
    res = simulate(reqs, _limits(True), COST)
    assert res.prefill_tokens_computed == 1024 + 16  # one engine block: the last token's
    assert np.all(np.isfinite(res.finish_s))


def test_a_small_pool_evicts_and_loses_hits() -> None:
    # Each prompt brings 8 new blocks (4096 tokens); the pool holds about two prompts.
    ids = [[0, *range(100 + 8 * i, 108 + 8 * i)] for i in range(10)]
    small = simulate(_requests(ids, prompt=9 * 512), _limits(True, blocks=600), COST)
    assert small.prefix_evictions > 0
    big = simulate(_requests(ids, prompt=9 * 512), _limits(True), COST)
    assert big.prefix_evictions == 0
    assert big.prefix_hit_tokens == 9 * 512  # block 0 for each of the 9 later prompts


def test_without_block_ids_or_caching_the_plain_engine_runs() -> None:
    plain = RequestSet(np.full(2, 100), np.full(2, 5), np.zeros(2))
    z = np.zeros(2)
    result = SimResult(z, z, z, z, z, z)
    assert type(make_sim(plain, _limits(True), COST, None, result)) is EngineSim
    traced = _requests([[1], [1]], prompt=400)
    assert type(make_sim(traced, _limits(False), COST, None, result)) is EngineSim
    assert type(make_sim(traced, _limits(True), COST, None, result)) is CachingEngineSim


def _capacity(path: Path, caching: str) -> float:
    config, ctx = build_request(
        model="llama-3.1-8b",
        gpu="h200-sxm",
        trace=str(path),
        knob_flags={"enable_prefix_caching": caching, "max_num_seqs": "64"},
    )
    return max_rate_meeting_sla(config, ctx, budget=ProbeBudget(max_probes=10, rel_tol=0.02))


@settings(max_examples=8, deadline=None)
@given(
    n=st.integers(min_value=30, max_value=80),
    shared=st.integers(min_value=1, max_value=8),
    extra=st.integers(min_value=1, max_value=3000),
    out=st.integers(min_value=10, max_value=300),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_caching_never_lowers_capacity_when_every_request_shares_a_prefix(
    n: int, shared: int, extra: int, out: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(0, 60_000, size=n)).round()
    prompt = shared * 512 + extra
    tail = -(-extra // 512)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        rows = [
            {
                "timestamp": float(t),
                "input_length": prompt,
                "output_length": out,
                "hash_ids": list(range(shared)) + [1000 + i * 10 + j for j in range(tail)],
            }
            for i, t in enumerate(times)
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        on, off = _capacity(path, "true"), _capacity(path, "false")
    # Both searches bisect to 2%: the cache may not lose more than that resolution.
    assert on >= off * (1 - 0.04)


def test_predict_shows_the_hit_rate_and_the_speedup() -> None:
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trace", str(SAMPLE)]
    result = runner.invoke(app, [*args, "--rate", "5"])
    assert result.exit_code == 0, result.output
    assert "prefix cache: hit rate" in result.stdout
    assert "replayed 6.41x faster" in result.stdout and "trace capacity:" in result.stdout
    off = runner.invoke(app, [*args, "--rate", "5", "--prefix-caching", "false", "--json"])
    assert "prefix_cache_hit_rate" not in json.loads(off.stdout)["extra"]


def test_the_binding_limit_counts_the_prefill_the_cache_saves() -> None:
    from tuner.backends.binding import binding_limit
    from tuner.perf.capacity import sim_capacity

    config, ctx = build_request(model="llama-3.1-8b", gpu="h200-sxm", trace=str(SAMPLE), rate=5)
    cap, at = sim_capacity(config, ctx, operating_point=False)
    hit = at.extra["prefix_cache_hit_rate"]
    assert isinstance(hit, float) and hit > 0.5
    on = binding_limit(config, ctx, cap, at)
    assert f"prefix cache hits {hit:.0%} of prompt tokens" in on.driver_text
    # Without the hits, the same load would spend a larger share of engine time on prompts.
    at_off = at.model_copy(update={"extra": {**at.extra, "prefix_cache_hit_rate": 0.0}})
    off = binding_limit(
        config.model_copy(update={"enable_prefix_caching": False}), ctx, cap, at_off
    )
    assert off.prefill_share > on.prefill_share
    assert "prefix cache" not in off.driver_text
