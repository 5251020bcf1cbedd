"""The engine simulation with a content-addressed prefix cache, for requests with block ids.

When a trace (or a session workload) says what each prompt contains, as block hash ids, and the
variant enables prefix caching, `CachingEngineSim` replaces the stated `--prefix-cache-hit`
fraction: at admission a prompt's leading cached blocks are hits and its prefill starts after
them (never past the prompt's last token, which is always computed, as in vLLM); when its
prefill completes its full blocks are cached; a finished or preempted sequence releases its
blocks to the LRU of `perf.prefix_cache`, which keeps only what the KV pool has free. The hit
rate, evictions and prefill tokens saved come out of the run (`prefix_metrics`).

Memory stays counted per sequence, as without caching: running sequences that share a prefix
are not credited with sharing its blocks, so the model is conservative on KV capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tuner.perf.costs import StepCostModel
from tuner.perf.prefix_cache import PrefixCache
from tuner.perf.sim_engine import EngineSim
from tuner.perf.speculative import Speculation

if TYPE_CHECKING:
    from tuner.bench.trace import BlockHashes
    from tuner.perf.scheduler import RequestSet, SchedulerLimits, SimResult

__all__ = ["CachingEngineSim", "make_sim", "prefix_cache_text", "prefix_metrics"]


class CachingEngineSim(EngineSim):
    """`EngineSim` whose prompts hit a prefix cache keyed by the requests' block hash ids."""

    def __init__(
        self,
        requests: RequestSet,
        limits: SchedulerLimits,
        target: StepCostModel,
        spec: Speculation | None,
        result: SimResult,
    ) -> None:
        super().__init__(requests, limits, target, spec, result, requests.user_start_s)
        assert requests.blocks is not None
        self.blocks: BlockHashes = requests.blocks
        self.cache = PrefixCache()
        self.hit_block_tokens = self.blocks.block_tokens
        self.holding: list[list[int]] = [[] for _ in range(self.n)]  # ids each sequence holds
        self.hits: list[int] = [0] * self.n  # leading blocks found cached at admission

    def _full_ids(self, i: int) -> list[int]:
        """Ids of request `i`'s full prompt blocks (a partial last block is never cached)."""
        return self.blocks.of(i)[: self.prompt[i] // self.hit_block_tokens]

    def start_token(self, i: int) -> int:
        """The prompt tokens of waiting request `i` found cached (prefill skips them)."""
        hits = self.cache.match(self._full_ids(i))
        self.hits[i] = hits
        cached = min(hits * self.hit_block_tokens, self.to_prefill[i] - 1)
        return max(0, (cached // self.bs) * self.bs)

    def admit(self, i: int, start: int, need: int) -> None:
        """Admit `i` holding its hit blocks, then shrink the LRU to what the pool has free."""
        first = math.isnan(self.scheduled[i])
        super().admit(i, start, need)
        held = self._full_ids(i)[: self.hits[i]]
        self.cache.acquire(held)
        self.holding[i] = held
        if first and i >= self.warmup:  # counted as vLLM counts queries and hits, in tokens
            self.res.prefix_query_tokens += self.prompt[i]
            self.res.prefix_hit_tokens += start
        self._trim()

    def prefill_done(self, i: int) -> None:
        """Request `i`'s prompt is computed: its full blocks are cached from now on."""
        full = self._full_ids(i)
        self.cache.acquire(full[len(self.holding[i]) :])
        self.holding[i] = full
        super().prefill_done(i)

    def finish_request(self, i: int, when: float) -> None:
        """A finished sequence's blocks stay cached, unreferenced."""
        self._release(i)
        super().finish_request(i, when)

    def preempt(self, victim: int) -> None:
        """A preempted sequence frees its blocks; they stay cached until evicted."""
        self._release(victim)
        super().preempt(victim)

    def _release(self, i: int) -> None:
        self.cache.release(self.holding[i])
        self.holding[i] = []
        self._trim()

    def _trim(self) -> None:
        """Unreferenced cached blocks live in the free KV pool; evict what does not fit."""
        free = self.capacity - self.prefill_blocks - self.decode_blocks_bound(self.G)
        self.cache.trim(int(max(0.0, free) * self.bs // self.hit_block_tokens))
        self.res.prefix_evictions = self.cache.evictions


def make_sim(
    requests: RequestSet,
    limits: SchedulerLimits,
    target: StepCostModel,
    spec: Speculation | None,
    result: SimResult,
) -> EngineSim:
    """The caching simulation when the requests carry block ids and caching is on; else the
    plain one (its stated `prefix_cache_hit` fraction, unchanged)."""
    if requests.blocks is not None and limits.prefix_caching:
        return CachingEngineSim(requests, limits, target, spec, result)
    return EngineSim(requests, limits, target, spec, result, requests.user_start_s)


def prefix_metrics(result: SimResult) -> dict[str, float | int]:
    """The run's prefix-cache outputs for `Metrics.extra` (empty when no cache was modelled)."""
    if not result.prefix_query_tokens:
        return {}
    return {
        "prefix_cache_hit_rate": result.prefix_hit_tokens / result.prefix_query_tokens,
        "prefix_cache_evictions": result.prefix_evictions,
        "prefill_tokens_saved": result.prefix_hit_tokens,
    }


def prefix_cache_text(extra: Mapping[str, object]) -> str | None:
    """The emergent prefix-cache outputs of a run (hit rate, evictions, tokens saved), or None."""
    rate = extra.get("prefix_cache_hit_rate")
    if not isinstance(rate, float | int):
        return None
    line = f"prefix cache: hit rate {rate:.1%} of prompt tokens"
    saved = extra.get("prefill_tokens_saved")
    if isinstance(saved, int):
        line += f", {saved:,} prefill tokens saved"
    evictions = extra.get("prefix_cache_evictions")
    if isinstance(evictions, int):
        line += f", {evictions:,} blocks evicted"
    return line
