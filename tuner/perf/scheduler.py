"""Discrete-event simulation of vLLM-style continuous batching on one engine (one TP group).

Each step (vLLM V1 order): every decoding sequence gets its 1 (or k+1 when speculating) tokens,
partially prefilled sequences continue their chunks, then waiting requests are admitted while
the token budget (`max_num_batched_tokens`), `max_num_seqs` and free KV blocks allow. When a
decoding sequence needs a block and none is free, the most recently admitted sequence is
preempted and later recomputed (its prompt plus the tokens generated so far are prefilled again).

Speed: between events (arrival that can be admitted, prefill chunk, completion, KV exhaustion)
the batch is constant and every step is a pure decode step whose duration grows linearly (each
sequence's context grows by one token per step), so a run of m steps is summed in closed form and
its inter-token latencies are stored as (first, increment, count, weight) arithmetic series.
Decoding sequences share a progress counter G (tokens advanced per sequence since the start), so
a sequence's context is `base + G` and the next completion is the head of a heap keyed by G.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tuner.perf.costs import StepCostModel
from tuner.perf.speculative import Speculation, step_coeffs

__all__ = ["RequestSet", "SchedulerLimits", "SimResult", "make_requests", "simulate"]

# Progress-counter tolerance (G is a float when speculation advances fractional tokens per step).
_EPS = 1e-9
_WAITING, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3


@dataclass(frozen=True)
class SchedulerLimits:
    """Engine knobs the scheduler obeys."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_blocks: int
    block_size: int = 16
    enable_chunked_prefill: bool = True
    prefix_cache_hit: float = 0.0  # fraction of each prompt (after the first) already cached
    request_overhead_s: float = 0.0  # arrival -> visible to the scheduler (HTTP, tokenization)


@dataclass(frozen=True)
class RequestSet:
    """Requests to replay: lengths, and arrival times (open loop) or a user count (closed loop)."""

    prompt_tokens: np.ndarray  # int, per request
    output_tokens: np.ndarray  # int, per request
    arrival_s: np.ndarray | None  # sorted; None = closed loop
    users: int = 1

    @property
    def count(self) -> int:
        """Number of requests."""
        return int(self.prompt_tokens.shape[0])


def make_requests(
    num_requests: int,
    input_tokens: int,
    output_tokens: int,
    *,
    length_spread: float = 0.0,
    rate_rps: float | None = None,
    users: int = 1,
    seed: int = 0,
) -> RequestSet:
    """Seeded request lengths (uniform +- spread) and Poisson arrivals (or closed loop)."""
    rng = np.random.default_rng(seed)

    def lengths(mean: int) -> np.ndarray:
        if length_spread <= 0:
            return np.full(num_requests, mean, dtype=np.int64)
        lo = max(1, int(round(mean * (1 - length_spread))))
        hi = max(lo, int(round(mean * (1 + length_spread))))
        return rng.integers(lo, hi + 1, size=num_requests, dtype=np.int64)

    prompts, outputs = lengths(input_tokens), lengths(output_tokens)
    arrivals = None
    if rate_rps is not None:
        arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, size=num_requests))
        arrivals -= arrivals[0]  # the first request arrives at t = 0
    return RequestSet(prompts, outputs, arrivals, users=max(1, users))


@dataclass
class SimResult:
    """Per-request timings (seconds) and engine counters of one simulated run."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray
    scheduled_s: np.ndarray  # first time any of its tokens were scheduled
    first_token_s: np.ndarray
    finish_s: np.ndarray
    itl_pieces: list[tuple[float, float, int, int]] = field(default_factory=list)
    num_steps: int = 0
    num_decode_runs: int = 0
    preemptions: int = 0
    kv_peak_fraction: float = 0.0
    kv_mean_fraction: float = 0.0
    prefill_tokens_computed: int = 0

    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Inter-token latencies (s) and their weights (sequences that received a token)."""
        if not self.itl_pieces:
            return np.zeros(0), np.zeros(0)
        arr = np.asarray(self.itl_pieces, dtype=np.float64)
        first, inc, count, weight = arr[:, 0], arr[:, 1], arr[:, 2].astype(np.int64), arr[:, 3]
        idx = np.repeat(np.arange(len(arr)), count)
        offsets = np.arange(idx.size) - np.repeat(np.cumsum(count) - count, count)
        return first[idx] + inc[idx] * offsets, weight[idx]


def simulate(
    requests: RequestSet,
    limits: SchedulerLimits,
    target: StepCostModel,
    spec: Speculation | None = None,
    *,
    max_run_steps: int | None = None,
) -> SimResult:
    """Run the requests through the continuous-batching engine; deterministic for given inputs.

    `max_run_steps` caps how many identical decode steps are summed at once (1 = step by step,
    the reference the closed-form runs are tested against).
    """
    n = requests.count
    prompt = requests.prompt_tokens.tolist()
    out = requests.output_tokens.tolist()
    bs = limits.block_size
    capacity = limits.kv_capacity_blocks
    budget_cap = limits.max_num_batched_tokens
    chunked = limits.enable_chunked_prefill
    ingress = limits.request_overhead_s
    queries = spec.queries_per_seq if spec else 1
    tps = spec.tokens_per_step if spec else 1.0
    max_seqs = max(1, min(limits.max_num_seqs, budget_cap // queries))
    cached = [
        (int(prompt[i] * limits.prefix_cache_hit) // bs) * bs if i > 0 else 0 for i in range(n)
    ]
    cached = [min(c, p - 1) if c else 0 for c, p in zip(cached, prompt, strict=True)]

    arrival = [math.inf] * n
    scheduled = [math.nan] * n
    first_tok = [math.nan] * n
    finish = [math.nan] * n
    state = [_WAITING] * n
    generated = [0.0] * n  # tokens generated so far (float while speculating)
    to_prefill = list(prompt)  # tokens the next prefill must hold (prompt + generated on recompute)
    computed = [0] * n  # tokens of `to_prefill` already in KV
    held = [0] * n  # blocks held while prefilling
    g_entry = [0.0] * n
    epoch = [0] * n  # invalidates heap entries of preempted sequences

    if requests.arrival_s is not None:
        arrival = requests.arrival_s.tolist()
        pending = deque(range(n))
        issued = n
    else:
        pending = deque()
        issued = min(requests.users, n)
        for i in range(issued):
            arrival[i] = 0.0
            pending.append(i)

    res = SimResult(
        prompt_tokens=requests.prompt_tokens.copy(),
        output_tokens=requests.output_tokens.copy(),
        arrival_s=np.zeros(n),
        scheduled_s=np.zeros(n),
        first_token_s=np.zeros(n),
        finish_s=np.zeros(n),
    )
    itl = res.itl_pieces
    waiting: deque[int] = deque()
    running: dict[int, None] = {}  # admission order; the last key is the preemption victim
    prefilling: list[int] = []
    decoding: dict[int, float] = {}  # id -> base, context = base + G
    heap: list[tuple[float, int, int]] = []  # (G at finish, id, epoch)
    sum_base = 0.0
    prefill_blocks = 0
    G = 0.0
    t = 0.0
    done = 0
    kv_time_weighted = 0.0
    kv_peak = 0.0
    next_closed = issued
    stalled_s = 0.0  # time decodes stalled behind prefill-only steps since their last token

    def decode_blocks(g: float) -> int:
        """Exact blocks the decoding sequences need at progress g (including this step's slots)."""
        if not decoding:
            return 0
        bases = np.fromiter(decoding.values(), dtype=np.float64, count=len(decoding))
        return int(np.ceil((bases + (g + queries)) / bs - _EPS).sum())

    def decode_blocks_bound(g: float) -> float:
        return (sum_base + len(decoding) * (g + queries)) / bs + len(decoding)

    def finish_request(i: int, when: float) -> None:
        nonlocal done, next_closed
        state[i] = _DONE
        finish[i] = when
        done += 1
        running.pop(i, None)
        if requests.arrival_s is None and next_closed < n:
            arrival[next_closed] = when
            pending.append(next_closed)
            next_closed += 1

    def preempt(victim: int) -> None:
        nonlocal sum_base, prefill_blocks
        res.preemptions += 1
        running.pop(victim)
        if state[victim] == _DECODE:
            base = decoding.pop(victim)
            sum_base -= base
            gen = math.floor(generated[victim] + (G - g_entry[victim]) + _EPS)
            generated[victim] = float(gen)
            epoch[victim] += 1
        else:
            prefilling.remove(victim)
            prefill_blocks -= held[victim]
            held[victim] = 0
        to_prefill[victim] = prompt[victim] + int(generated[victim])
        computed[victim] = 0
        state[victim] = _WAITING
        waiting.appendleft(victim)

    while done < n:
        while pending and (arrival[pending[0]] + ingress) <= t + _EPS:
            waiting.append(pending.popleft())
        if not running and not waiting:
            if not pending:
                break
            t = arrival[pending[0]] + ingress
            continue

        # 1. decodes: make room for this step's KV slots, preempting the newest if needed.
        while decoding and (
            decode_blocks_bound(G) + prefill_blocks > capacity
            and decode_blocks(G) + prefill_blocks > capacity
        ):
            preempt(next(reversed(running)))
        num_decode = len(decoding)
        if chunked:
            budget = budget_cap - num_decode * queries
        else:
            # Without chunked prefill a whole prompt is scheduled alone (decodes stall that step).
            budget = max(budget_cap, to_prefill[waiting[0]]) if waiting else 0

        # 2. running prefills continue, 3. waiting requests are admitted.
        chunks: list[tuple[int, int]] = []
        dec_bound = decode_blocks_bound(G)
        dec_exact = -1
        for i in list(prefilling):
            if budget <= 0:
                break
            chunk = min(to_prefill[i] - computed[i], budget)
            need = math.ceil((computed[i] + chunk) / bs) - held[i]
            if need > capacity - prefill_blocks - dec_bound:
                if dec_exact < 0:
                    dec_exact = decode_blocks(G)
                if need > capacity - prefill_blocks - dec_exact:
                    break
            held[i] += need
            prefill_blocks += need
            chunks.append((i, chunk))
            budget -= chunk
        while waiting and budget > 0 and len(running) < max_seqs:
            i = waiting[0]
            start = cached[i] if to_prefill[i] == prompt[i] else 0
            remaining = to_prefill[i] - start
            if not chunked and remaining > budget:
                break
            chunk = min(remaining, budget)
            need = math.ceil((start + chunk) / bs)
            if need > capacity - prefill_blocks - dec_bound:
                if dec_exact < 0:
                    dec_exact = decode_blocks(G)
                if need > capacity - prefill_blocks - dec_exact:
                    break
            waiting.popleft()
            running[i] = None
            prefilling.append(i)
            state[i] = _PREFILL
            computed[i] = start
            held[i] = need
            prefill_blocks += need
            if math.isnan(scheduled[i]):
                scheduled[i] = t
            chunks.append((i, chunk))
            budget -= chunk

        if not chunked and chunks:
            num_decode = 0
        if num_decode == 0 and not chunks:
            # Nothing fits (cannot happen for a feasible plan); wait for the next arrival.
            if pending:
                t = max(t, (arrival[pending[0]] + ingress))
                continue
            break

        # Token-based estimate (half a block of rounding per sequence) keeps this O(1).
        used_blocks = prefill_blocks + min(
            dec_bound - 0.5 * len(decoding), float(capacity - prefill_blocks)
        )
        kv_peak = max(kv_peak, used_blocks)

        if not chunks:
            # A run of identical pure-decode steps: find how many until the next event.
            const, per_ctx = step_coeffs(target, spec, num_decode, 0, 0)
            while heap and (heap[0][2] != epoch[heap[0][1]] or state[heap[0][1]] != _DECODE):
                heapq.heappop(heap)
            steps = max(1, math.ceil((heap[0][0] - G) / tps - _EPS))
            admissible = len(running) < max_seqs and not waiting
            if admissible and pending:
                wait = (arrival[pending[0]] + ingress) - t
                d0 = const + per_ctx * (sum_base + num_decode * G)
                slope = per_ctx * num_decode * tps
                steps = min(steps, max(1, _steps_until(wait, d0, slope)))
            if max_run_steps is not None:
                steps = min(steps, max_run_steps)
            if decode_blocks_bound(G + (steps - 1) * tps) + prefill_blocks > capacity:
                steps = _steps_within_kv(
                    decoding, G, tps, queries, bs, capacity - prefill_blocks, steps
                )
            s0 = sum_base + num_decode * G
            d0 = const + per_ctx * s0
            slope = per_ctx * num_decode * tps
            duration = steps * d0 + slope * steps * (steps - 1) / 2.0
            if stalled_s > 0:
                # The first token after prefill-only steps also waited for them.
                itl.append((d0 + stalled_s, 0.0, 1, num_decode))
                if steps > 1:
                    itl.append((d0 + slope, slope, steps - 1, num_decode))
                stalled_s = 0.0
            else:
                itl.append((d0, slope, steps, num_decode))
            kv_time_weighted += used_blocks * duration
            t += duration
            G += steps * tps
            res.num_steps += steps
            res.num_decode_runs += 1
        else:
            prefill_tokens = sum(c for _, c in chunks)
            completing = [i for i, c in chunks if computed[i] + c >= to_prefill[i]]
            const, per_ctx = step_coeffs(target, spec, num_decode, prefill_tokens, len(completing))
            attn = sum(target.prefill_attn_s(c, computed[i]) for i, c in chunks)
            duration = const + per_ctx * (sum_base + num_decode * G) + attn
            if num_decode:
                itl.append((duration + stalled_s, 0.0, 1, num_decode))
                stalled_s = 0.0
                G += tps
            elif decoding:
                stalled_s += duration
            kv_time_weighted += used_blocks * duration
            t += duration
            res.num_steps += 1
            res.prefill_tokens_computed += prefill_tokens
            for i, c in chunks:
                computed[i] += c
            for i in completing:
                prefilling.remove(i)
                prefill_blocks -= held[i]
                held[i] = 0
                generated[i] += 1.0
                if math.isnan(first_tok[i]):
                    first_tok[i] = t
                if generated[i] >= out[i] - _EPS:
                    finish_request(i, t)
                    continue
                state[i] = _DECODE
                g_entry[i] = G
                base = to_prefill[i] - G
                decoding[i] = base
                sum_base += base
                heapq.heappush(heap, (G + out[i] - generated[i], i, epoch[i]))

        # Completions at the end of this step (or run).
        while heap and heap[0][0] <= G + _EPS:
            g_fin, i, ep = heapq.heappop(heap)
            if ep != epoch[i] or state[i] != _DECODE:
                continue
            sum_base -= decoding.pop(i)
            generated[i] = float(out[i])
            finish_request(i, t)

    res.arrival_s = np.asarray(arrival, dtype=np.float64)
    res.scheduled_s = np.asarray(scheduled, dtype=np.float64)
    res.first_token_s = np.asarray(first_tok, dtype=np.float64)
    res.finish_s = np.asarray(finish, dtype=np.float64)
    res.kv_peak_fraction = kv_peak / capacity if capacity else 0.0
    res.kv_mean_fraction = kv_time_weighted / (t * capacity) if t > 0 and capacity else 0.0
    return res


def _steps_until(wait_s: float, d0: float, slope: float) -> int:
    """Fewest steps whose durations d0, d0+slope, ... add up to at least `wait_s`."""
    if wait_s <= 0:
        return 1
    if slope <= 0:
        return math.ceil(wait_s / d0 - _EPS)
    # m d0 + slope m (m - 1) / 2 >= wait  ->  (slope/2) m^2 + (d0 - slope/2) m - wait >= 0
    a, b = slope / 2.0, d0 - slope / 2.0
    root = (-b + math.sqrt(b * b + 4 * a * wait_s)) / (2 * a)
    return max(1, math.ceil(root - _EPS))


def _steps_within_kv(
    decoding: dict[int, float],
    g: float,
    tps: float,
    queries: int,
    bs: int,
    capacity: int,
    limit: int,
) -> int:
    """Largest m <= limit such that the first m steps all find their KV blocks (at least 1)."""
    bases = np.fromiter(decoding.values(), dtype=np.float64, count=len(decoding))

    def fits(step: int) -> bool:
        ctx = bases + (g + step * tps + queries)
        return int(np.ceil(ctx / bs - _EPS).sum()) <= capacity

    lo, hi = 1, limit  # step index 0 fits (checked by the caller); find the last fitting index
    if fits(hi - 1):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid - 1):
            lo = mid
        else:
            hi = mid
    return lo
