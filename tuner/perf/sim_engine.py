"""The state machine behind `perf.scheduler.simulate`: one continuous-batching engine, by steps.

Named steps of one iteration (vLLM V1 order): `admit_arrivals` (requests visible to the
scheduler), `make_room` (preempt the newest sequence while decodes lack KV blocks),
`schedule_prefills` (running prefills continue, waiting requests are admitted), then either
`run_decodes` (a closed-form run of identical pure-decode steps) or `run_mixed_step` (one step
with prefill chunks), and `finish_decoded` (completions at the end of the step or run).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from tuner.perf.costs import StepCostModel
from tuner.perf.decode_runs import EPS, steps_until, steps_within_kv
from tuner.perf.engine_steps import RecvPoll, engine_step_coeffs
from tuner.perf.speculative import Speculation

if TYPE_CHECKING:
    from tuner.perf.scheduler import RequestSet, SchedulerLimits, SimResult

_WAITING, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3


class EngineSim:
    """Mutable state of one simulated run; `simulate` drives it step by step."""

    def __init__(
        self,
        requests: RequestSet,
        limits: SchedulerLimits,
        target: StepCostModel,
        spec: Speculation | None,
        result: SimResult,
        user_start_s: np.ndarray | None,
    ) -> None:
        n = requests.count
        self.n = n
        self.target, self.spec, self.res = target, spec, result
        self.prompt = requests.prompt_tokens.tolist()
        self.out = requests.output_tokens.tolist()
        self.bs, self.capacity = limits.block_size, limits.kv_capacity_blocks
        self.budget_cap, self.chunked = limits.max_num_batched_tokens, limits.enable_chunked_prefill
        self.mixed, self.ingress = limits.mix_prefill_decode, limits.request_overhead_s
        self.wait_iters, self.wait_tokens = limits.batch_wait_iters, limits.batch_wait_tokens
        self.engine, self.dp_ranks = limits.engine, limits.dp_ranks
        self.no_evict = self.engine is not None and self.engine.admission == "no_evict"
        self.adp_wait = (
            self.engine.adp_balance_wait_iters if self.engine and self.dp_ranks > 1 else 0
        )
        self.poll = RecvPoll(self.engine.recv_interval_steps if self.engine else 1)
        self.reserved = 0  # no-evict: blocks the running requests need to their last token
        self.waited = 0  # steps new prompts have been held so far (batch waiting)
        self.queries = spec.queries_per_seq if spec else 1
        self.tps = spec.tokens_per_step if spec else 1.0
        self.max_seqs = max(1, min(limits.max_num_seqs, self.budget_cap // self.queries))
        hit = limits.prefix_cache_hit
        cached = [
            (int(p * hit) // self.bs) * self.bs if i else 0 for i, p in enumerate(self.prompt)
        ]
        self.first_token_ready = requests.first_token_ready
        if requests.preloaded is not None:
            cached = requests.preloaded.tolist()
        self.cached = [min(c, p - 1) if c else 0 for c, p in zip(cached, self.prompt, strict=True)]
        self._init_request_state(n)
        self._init_arrivals(requests, user_start_s)
        self.waiting: deque[int] = deque()
        self.running: dict[int, None] = {}  # admission order; the last key is the victim
        self.prefilling: list[int] = []
        self.decoding: dict[int, float] = {}  # id -> base, context = base + G
        self.heap: list[tuple[float, int, int]] = []  # (G at finish, id, epoch)
        self.sum_base = 0.0
        self.prefill_blocks = 0
        self.G = 0.0
        self.t = 0.0
        self.done = 0
        self.kv_time_weighted = 0.0
        self.kv_peak = 0.0
        self.stalled_s = 0.0  # time decodes stalled behind prefill-only steps
        # Step coefficients by (decodes, prefill tokens, prefill logits): a run repeats few shapes.
        self._coeffs: dict[tuple[int, int, int], tuple[float, float]] = {}

    def _init_request_state(self, n: int) -> None:
        self.arrival = [math.inf] * n
        self.scheduled = [math.nan] * n
        self.first_tok = [math.nan] * n
        self.finish = [math.nan] * n
        self.state = [_WAITING] * n
        self.generated = [0.0] * n  # tokens generated so far (float while speculating)
        self.to_prefill = list(self.prompt)  # prompt (+ generated tokens on recompute)
        self.computed = [0] * n  # tokens of `to_prefill` already in KV
        self.held = [0] * n  # blocks held while prefilling
        self.g_entry = [0.0] * n
        self.epoch = [0] * n  # invalidates heap entries of preempted sequences
        self.reservation = [0] * n  # no-evict: blocks reserved to completion while running

    def _init_arrivals(self, requests: RequestSet, user_start_s: np.ndarray | None) -> None:
        """Open loop: every arrival is known. Closed loop: each user's first request."""
        self.closed = requests.arrival_s is None
        self.warmup = requests.warmup
        self.pending: list[tuple[float, int]] = []  # heap of (arrival, id)
        if not self.closed:
            assert requests.arrival_s is not None
            self.arrival = requests.arrival_s.tolist()
            self.pending = [(a, i) for i, a in enumerate(self.arrival)]
            heapq.heapify(self.pending)
            self.next_closed = self.n
        else:
            issued = min(requests.users, self.n)
            starts = user_start_s if user_start_s is not None else np.zeros(issued)
            for i in range(issued):
                self.arrival[i] = float(starts[i]) if i < len(starts) else 0.0
                heapq.heappush(self.pending, (self.arrival[i], i))
            self.next_closed = issued
        w = min(self.warmup, self.n - 1)
        self.measure_from = self.arrival[w] if w < len(self.arrival) else 0.0

    # ------------------------------------------------------------------ arrivals and exits

    def next_visible_s(self) -> float:
        """When the next pending request becomes visible to the scheduler."""
        return self.pending[0][0] + self.ingress

    def admit_arrivals(self) -> None:
        """Move requests whose arrival (+ ingress) has passed into the waiting queue."""
        while self.pending and self.next_visible_s() <= self.t + EPS:
            self.waiting.append(heapq.heappop(self.pending)[1])

    def finish_request(self, i: int, when: float) -> None:
        """Record a completion; in closed loop its user sends the next unsent request."""
        self.state[i] = _DONE
        self.finish[i] = when
        self.done += 1
        self.running.pop(i, None)
        self.reserved -= self.reservation[i]
        self.reservation[i] = 0
        if self.closed and self.next_closed < self.n:
            nxt = self.next_closed
            self.arrival[nxt] = when
            if nxt == self.warmup:
                self.measure_from = when
            heapq.heappush(self.pending, (when, nxt))
            self.next_closed += 1

    # ------------------------------------------------------------------ KV accounting

    def decode_blocks(self, g: float) -> int:
        """Exact blocks the decoding sequences need at progress g (with this step's slots)."""
        if not self.decoding:
            return 0
        bases = np.fromiter(self.decoding.values(), dtype=np.float64, count=len(self.decoding))
        return int(np.ceil((bases + (g + self.queries)) / self.bs - EPS).sum())

    def decode_blocks_bound(self, g: float) -> float:
        """Upper bound of `decode_blocks` in O(1)."""
        return (self.sum_base + len(self.decoding) * (g + self.queries)) / self.bs + len(
            self.decoding
        )

    def preempt(self, victim: int) -> None:
        """Free the victim's blocks; it waits (first in line) to be recomputed."""
        self.res.preemptions += 1
        self.running.pop(victim)
        if self.state[victim] == _DECODE:
            base = self.decoding.pop(victim)
            self.sum_base -= base
            gen = math.floor(self.generated[victim] + (self.G - self.g_entry[victim]) + EPS)
            self.generated[victim] = float(gen)
            self.epoch[victim] += 1
        else:
            self.prefilling.remove(victim)
            self.prefill_blocks -= self.held[victim]
            self.held[victim] = 0
        self.to_prefill[victim] = self.prompt[victim] + int(self.generated[victim])
        self.computed[victim] = 0
        self.state[victim] = _WAITING
        self.waiting.appendleft(victim)

    def make_room(self) -> None:
        """Preempt the newest sequences until this step's decode KV slots fit (a no-evict engine
        reserved them at admission and never preempts)."""
        while (
            not self.no_evict
            and self.decoding
            and (
                self.decode_blocks_bound(self.G) + self.prefill_blocks > self.capacity
                and self.decode_blocks(self.G) + self.prefill_blocks > self.capacity
            )
        ):
            self.preempt(next(reversed(self.running)))

    # ------------------------------------------------------------------ scheduling

    def fits(self, need: int, dec: list[float]) -> bool:
        """Whether `need` more blocks fit; refines the O(1) decode bound only when it must."""
        free = self.capacity - self.prefill_blocks
        if need <= free - dec[0]:
            return True
        if dec[1] < 0:
            dec[1] = float(self.decode_blocks(self.G))
        return need <= free - dec[1]

    def schedule_prefills(self, budget: int) -> list[tuple[int, int]]:
        """Chunks (id, tokens) of this step: running prefills continue, then admissions."""
        chunks: list[tuple[int, int]] = []
        dec = [self.decode_blocks_bound(self.G), -1.0]  # bound, exact (lazily)
        for i in self.prefilling:  # not changed in this loop
            if budget <= 0:
                break
            chunk = min(self.to_prefill[i] - self.computed[i], budget)
            need = math.ceil((self.computed[i] + chunk) / self.bs) - self.held[i]
            if not self.fits(need, dec):
                break
            self.held[i] += need
            self.prefill_blocks += need
            chunks.append((i, chunk))
            budget -= chunk
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            i = self.waiting[0]
            start = self.start_token(i)
            remaining = self.to_prefill[i] - start
            if not self.chunked and remaining > budget:
                break
            chunk = min(remaining, budget)
            need = math.ceil((start + chunk) / self.bs)
            if not self.fits(need, dec) or not self.reserve(i):
                break
            self.admit(i, start, need)
            chunks.append((i, chunk))
            budget -= chunk
        return chunks

    def start_token(self, i: int) -> int:
        """Prompt tokens of waiting request `i` already cached (its prefill starts there)."""
        return self.cached[i] if self.to_prefill[i] == self.prompt[i] else 0

    def reserve(self, i: int) -> bool:
        """No-evict admission (TensorRT-LLM GUARANTEED_NO_EVICT): reserve the blocks request `i`
        needs to its last output token (and this step's lookahead) if they fit; other engines
        reserve nothing."""
        if not self.no_evict:
            return True
        tokens = self.to_prefill[i] + self.out[i] - int(self.generated[i]) + self.queries
        blocks = math.ceil(tokens / self.bs)
        if self.reserved + blocks > self.capacity:
            return False
        self.reserved += blocks
        self.reservation[i] = blocks
        return True

    def admit(self, i: int, start: int, need: int) -> None:
        """Waiting request `i` starts prefilling at token `start` holding `need` blocks."""
        self.waiting.popleft()
        self.running[i] = None
        self.prefilling.append(i)
        self.state[i] = _PREFILL
        self.computed[i] = start
        self.held[i] = need
        self.prefill_blocks += need
        if math.isnan(self.scheduled[i]):
            self.scheduled[i] = self.t

    def step_budget(self) -> int:
        """Prefill tokens this step may schedule."""
        decode_tokens = len(self.decoding) * self.queries * self.mixed
        if self.chunked:
            return self.budget_cap - decode_tokens
        if not self.waiting:
            return 0
        if self.mixed and self.decoding:
            # Whole prompts only, in what the decodes leave of the budget (vLLM V1 `schedule`:
            # running requests first, an unchunked prompt that does not fit waits).
            return self.budget_cap - decode_tokens
        # Alone (prefill-first engines), a whole prompt runs even past the budget.
        return max(self.budget_cap, self.to_prefill[self.waiting[0]])

    def used_blocks(self) -> float:
        """Token-based KV estimate (half a block of rounding per sequence), O(1)."""
        dec_bound = self.decode_blocks_bound(self.G)
        return self.prefill_blocks + min(
            dec_bound - 0.5 * len(self.decoding), float(self.capacity - self.prefill_blocks)
        )

    def _record_itl(self, piece: tuple[float, float, int, int]) -> None:
        """Keep inter-token gaps of the measured window only (warm-up ramp excluded)."""
        if self.t >= self.measure_from - EPS:
            self.res.itl_pieces.append(piece)

    # ------------------------------------------------------------------ steps

    def coeffs(self, num_decode: int, prefill_tokens: int, logits: int) -> tuple[float, float]:
        """`engine_step_coeffs` of this run's engine, computed once per step shape."""
        key = (num_decode, prefill_tokens, logits)
        if key not in self._coeffs:
            shape = engine_step_coeffs(self.target, self.spec, self.engine, self.dp_ranks, key)
            self._coeffs[key] = shape
        return self._coeffs[key]

    def decode_run_length(
        self, num_decode: int, max_run_steps: int | None, until_arrival: bool = False
    ) -> int:
        """Identical pure-decode steps until the next event (`until_arrival`: arrivals too)."""
        heap, epoch, state = self.heap, self.epoch, self.state
        while heap and (heap[0][2] != epoch[heap[0][1]] or state[heap[0][1]] != _DECODE):
            heapq.heappop(heap)
        steps = max(1, math.ceil((heap[0][0] - self.G) / self.tps - EPS))
        const, per_ctx = self.coeffs(num_decode, 0, 0)
        admissible = len(self.running) < self.max_seqs and (until_arrival or not self.waiting)
        if self.poll.gated:  # arrivals wait for the next poll: the run ends there, not at them
            steps, admissible = min(steps, self.poll.steps_to_poll()), False
        if admissible and self.pending:
            wait = self.next_visible_s() - self.t
            d0 = const + per_ctx * (self.sum_base + num_decode * self.G)
            slope = per_ctx * num_decode * self.tps
            steps = min(steps, max(1, steps_until(wait, d0, slope)))
        if max_run_steps is not None:
            steps = min(steps, max_run_steps)
        free = self.capacity - self.prefill_blocks
        if self.decode_blocks_bound(self.G + (steps - 1) * self.tps) > free:
            steps = steps_within_kv(
                self.decoding, self.G, self.tps, self.queries, self.bs, free, steps
            )
        return steps

    def run_decodes(self, num_decode: int, steps: int, used: float) -> None:
        """`steps` identical pure-decode steps, summed in closed form."""
        const, per_ctx = self.coeffs(num_decode, 0, 0)
        d0 = const + per_ctx * (self.sum_base + num_decode * self.G)
        slope = per_ctx * num_decode * self.tps
        duration = steps * d0 + slope * steps * (steps - 1) / 2.0
        if self.stalled_s > 0:
            # The first token after prefill-only steps also waited for them.
            self._record_itl((d0 + self.stalled_s, 0.0, 1, num_decode))
            if steps > 1:
                self._record_itl((d0 + slope, slope, steps - 1, num_decode))
            self.stalled_s = 0.0
        else:
            self._record_itl((d0, slope, steps, num_decode))
        self.kv_time_weighted += used * duration
        self.t += duration
        self.G += steps * self.tps
        self.poll.decoded(steps)
        self.res.num_steps += steps
        self.res.num_decode_runs += 1

    def run_mixed_step(self, chunks: list[tuple[int, int]], num_decode: int, used: float) -> None:
        """One step with prefill chunks (and `num_decode` decodes); completes finished prefills."""
        prefill_tokens = sum(c for _, c in chunks)
        completing = [i for i, c in chunks if self.computed[i] + c >= self.to_prefill[i]]
        const, per_ctx = self.coeffs(num_decode, prefill_tokens, len(completing))
        attn = sum(self.target.prefill_attn_s(c, self.computed[i]) for i, c in chunks)
        duration = const + per_ctx * (self.sum_base + num_decode * self.G) + attn
        if num_decode:
            self._record_itl((duration + self.stalled_s, 0.0, 1, num_decode))
            self.stalled_s = 0.0
            self.G += self.tps
        elif self.decoding:
            self.stalled_s += duration
        self.kv_time_weighted += used * duration
        self.t += duration
        self.poll.prefilled()
        self.res.num_steps += 1
        self.res.prefill_tokens_computed += prefill_tokens
        for i, c in chunks:
            self.computed[i] += c
        for i in completing:
            self.prefill_done(i)

    def prefill_done(self, i: int) -> None:
        """Request `i` got its first token: it finishes or starts decoding."""
        self.prefilling.remove(i)
        self.prefill_blocks -= self.held[i]
        self.held[i] = 0
        self.generated[i] += 1.0
        if math.isnan(self.first_tok[i]):
            self.first_tok[i] = self.t
        if self.generated[i] >= self.out[i] - EPS:
            self.finish_request(i, self.t)
            return
        self.state[i] = _DECODE
        self.g_entry[i] = self.G
        base = self.to_prefill[i] - self.G
        self.decoding[i] = base
        self.sum_base += base
        heapq.heappush(self.heap, (self.G + self.out[i] - self.generated[i], i, self.epoch[i]))

    def finish_decoded(self) -> None:
        """Complete every decoding sequence whose last token came out this step or run."""
        while self.heap and self.heap[0][0] <= self.G + EPS:
            _g, i, ep = heapq.heappop(self.heap)
            if ep != self.epoch[i] or self.state[i] != _DECODE:
                continue
            self.sum_base -= self.decoding.pop(i)
            self.generated[i] = float(self.out[i])
            self.finish_request(i, self.t)
