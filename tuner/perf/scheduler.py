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

import math
from dataclasses import dataclass, field
from typing import Unpack

import numpy as np

from tuner.bench.arrivals import ArrivalPlan, TraceOptions, plan_arrivals
from tuner.bench.trace import BlockHashes
from tuner.perf.costs import StepCostModel
from tuner.perf.engines import EngineModel
from tuner.perf.prefix_sim import make_sim
from tuner.perf.sim_engine import EngineSim
from tuner.perf.speculative import Speculation

__all__ = [
    "RequestSet",
    "SchedulerLimits",
    "SimResult",
    "make_requests",
    "requests_from_plan",
    "simulate",
]


@dataclass(frozen=True)
class SchedulerLimits:
    """Engine knobs the scheduler obeys."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_blocks: int
    block_size: int = 16
    enable_chunked_prefill: bool = True
    # False: a step with prefill chunks carries no decodes, which wait (prefill-first, SGLang's
    # default `enable_mixed_chunk=False`); True: decodes ride along (vLLM, TensorRT-LLM).
    mix_prefill_decode: bool = True
    prefix_cache_hit: float = 0.0  # fraction of each prompt (after the first) already cached
    # Requests carrying block hash ids are matched against a content-addressed cache instead
    # (perf.prefix_cache): True when the variant enables prefix caching.
    prefix_caching: bool = False
    request_overhead_s: float = 0.0  # arrival -> visible to the scheduler (HTTP, tokenization)
    # Batch waiting (TensorRT-LLM `batch_wait_timeout_iters` / `batch_wait_max_tokens_ratio`):
    # while sequences decode, new prompts are held for up to `batch_wait_iters` steps until the
    # step would carry `batch_wait_tokens` tokens. 0 = off (vLLM, SGLang, TensorRT-LLM default).
    batch_wait_iters: int = 0
    batch_wait_tokens: int = 0
    # The engine whose admission (no-evict reserves every request's blocks to its last token and
    # never preempts) and CUDA-graph coverage (steps outside it pay StepCostModel.eager_s) the
    # simulation obeys; None: recompute preemption and every step replays a graph.
    engine: EngineModel | None = None
    # Attention-DP ranks: with the engine's ADP balancing on, a new prompt waits while others
    # decode until every rank has one, or the engine's `adp_balance_wait_iters` have passed.
    dp_ranks: int = 1


@dataclass(frozen=True)
class RequestSet:
    """Requests to replay: lengths, arrival times (open loop) or users and their start offsets."""

    prompt_tokens: np.ndarray  # int, per request
    output_tokens: np.ndarray  # int, per request
    arrival_s: np.ndarray | None  # sorted; None = closed loop
    users: int = 1
    user_start_s: np.ndarray | None = None  # closed loop: when each user sends its first request
    warmup: int = 0  # requests [0, warmup) run but are left out of the statistics
    blocks: BlockHashes | None = None  # prompts as block hash ids: the prefix cache's keys
    # Prompt tokens whose KV arrives already computed (a disaggregated decode worker receives
    # them from a prefill worker): the prefill starts there, as after a prefix-cache hit.
    preloaded: np.ndarray | None = None
    # With `preloaded` the whole prompt: the prefill worker also sampled the first token, so a
    # request joins the decode batch on admission with no step of its own (and its first token
    # streams then).
    first_token_ready: bool = False

    @property
    def count(self) -> int:
        """Number of requests."""
        return int(self.prompt_tokens.shape[0])


def requests_from_plan(plan: ArrivalPlan, ramp_s: float = 0.0) -> RequestSet:
    """The simulator's view of a planned trace; closed-loop users start spread over `ramp_s`."""
    starts = plan.user_start_s(ramp_s) if plan.user_phase is not None else None
    return RequestSet(
        plan.input_tokens,
        plan.output_tokens,
        plan.arrival_s,
        users=plan.users,
        user_start_s=starts,
        warmup=plan.warmup,
        blocks=plan.blocks,
    )


def make_requests(
    num_requests: int,
    input_tokens: int,
    output_tokens: int,
    *,
    ramp_s: float = 0.0,
    **trace: Unpack[TraceOptions],
) -> RequestSet:
    """Seeded requests from the shared arrival planner (`bench.arrivals`), warm-up included."""
    plan = plan_arrivals(num_requests, input_tokens, output_tokens, **trace)
    return requests_from_plan(plan, ramp_s)


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
    # Prefix cache by block hash (perf.prefix_sim), measured requests' first admissions only.
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0
    prefix_evictions: int = 0
    warmup: int = 0  # requests [0, warmup) are excluded from the statistics

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
    res = SimResult(
        prompt_tokens=requests.prompt_tokens.copy(),
        output_tokens=requests.output_tokens.copy(),
        arrival_s=np.zeros(n),
        scheduled_s=np.zeros(n),
        first_token_s=np.zeros(n),
        finish_s=np.zeros(n),
        warmup=min(requests.warmup, max(0, n - 1)),
    )
    sim = make_sim(requests, limits, target, spec, res)
    while sim.done < n:
        if not _advance(sim, max_run_steps):
            break
    res.arrival_s = np.asarray(sim.arrival, dtype=np.float64)
    res.scheduled_s = np.asarray(sim.scheduled, dtype=np.float64)
    res.first_token_s = np.asarray(sim.first_tok, dtype=np.float64)
    res.finish_s = np.asarray(sim.finish, dtype=np.float64)
    capacity = limits.kv_capacity_blocks
    res.kv_peak_fraction = sim.kv_peak / capacity if capacity else 0.0
    busy = sim.t * capacity
    res.kv_mean_fraction = sim.kv_time_weighted / busy if busy > 0 else 0.0
    return res


def _advance(sim: EngineSim, max_run_steps: int | None) -> bool:
    """One scheduler iteration (a step or a run of decode steps); False when nothing can run."""
    if sim.poll.now(bool(sim.decoding)):
        sim.admit_arrivals()
        if sim.first_token_ready and sim.waiting:
            _join_decoding(sim)
    if not sim.running and not sim.waiting:
        if not sim.pending:
            return False
        sim.t = sim.next_visible_s()
        return True
    sim.make_room()  # 1. decodes get this step's KV slots
    num_decode = len(sim.decoding)
    held = _held_steps(sim, num_decode, max_run_steps)  # new prompts held back to batch them
    # 2.-3. prefills continue, admissions
    chunks = [] if held else sim.schedule_prefills(sim.step_budget())
    if chunks:
        sim.waited = 0
    if chunks and not sim.mixed:
        num_decode = 0
    if num_decode == 0 and not chunks:
        # Nothing fits (cannot happen for a feasible plan); wait for the next arrival.
        if sim.pending:
            sim.t = max(sim.t, sim.next_visible_s())
            return True
        return False
    used = sim.used_blocks()
    sim.kv_peak = max(sim.kv_peak, used)
    if chunks:
        sim.run_mixed_step(chunks, num_decode, used)
    else:
        steps = held or sim.decode_run_length(num_decode, max_run_steps)
        sim.run_decodes(num_decode, steps, used)
    sim.finish_decoded()
    return True


def _join_decoding(sim: EngineSim) -> None:
    """Admit waiting requests whose whole prompt arrived computed straight into the decode batch
    while their KV fits: no prefill step, the first token streams on admission."""
    while sim.waiting and len(sim.running) < sim.max_seqs:
        i = sim.waiting[0]
        need = math.ceil(sim.prompt[i] / sim.bs)
        if not sim.fits(need, [sim.decode_blocks_bound(sim.G), -1.0]) or not sim.reserve(i):
            return
        sim.admit(i, sim.prompt[i], need)
        sim.prefill_done(i)


def _held_steps(sim: EngineSim, num_decode: int, max_run_steps: int | None) -> int:
    """Pure-decode steps to run while the engine holds the waiting prompts back (0: none).

    Two engine behaviours hold new context requests only while others decode:
    TensorRT-LLM's batch waiting (`PyExecutor._waiting_requests`), until the step's tokens
    (whole prompts plus one per decode) reach the threshold or `batch_wait_iters` steps passed;
    and its attention-DP balancing (`_balance_adp_requests`, `attention_dp_config`), until every
    DP rank has a prompt or `adp_balance_wait_iters` steps passed.
    """
    if not ((sim.wait_iters or sim.adp_wait) and num_decode and sim.waiting):
        return 0
    if sim.prefilling or len(sim.running) >= sim.max_seqs:
        return 0
    limit = 0
    if (
        sim.wait_iters
        and sim.waited < sim.wait_iters
        and _step_tokens(sim, num_decode) < sim.wait_tokens
    ):
        limit = sim.wait_iters
    if sim.adp_wait and sim.waited < sim.adp_wait and len(sim.waiting) < sim.dp_ranks:
        limit = max(limit, sim.adp_wait)
    if not limit:
        return 0  # the wait is over; it restarts once prompts are scheduled
    steps = sim.decode_run_length(num_decode, max_run_steps, until_arrival=True)
    steps = min(steps, limit - sim.waited)
    sim.waited += steps
    return steps


def _step_tokens(sim: EngineSim, num_decode: int) -> int:
    """Tokens the next step would carry: the decodes plus the whole waiting prompts that fit."""
    tokens = num_decode * sim.queries
    for i in sim.waiting:
        if tokens + sim.to_prefill[i] > sim.budget_cap:
            break
        tokens += sim.to_prefill[i]
    return tokens
