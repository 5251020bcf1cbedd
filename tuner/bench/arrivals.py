"""One arrival planner for every backend: request lengths, arrival times, user starts, warm-up.

The simulator (`perf.scheduler`), the in-process engine replay (`engine.replay`) and the HTTP
load generator (`bench.loadgen`) all draw their trace here, so one seed gives one trace
everywhere. Pure numpy; no HTTP, no files (the caller loads a `--lengths` file with
`bench.lengths`).

Steady-state definitions (the same in every backend):
- Requests are issued in index order. Open loop: request i is sent at `arrival_s[i]` (Poisson,
  first at t = 0). Closed loop: `users` clients; user u sends request u at its start offset,
  and whenever a request finishes its user sends the next unsent index.
- Staggered start: the users start at independent uniform phases of the ramp (the backend's
  estimate of one request's cycle), so their requests are spread over a cycle from the start,
  as real clients drift apart within a few requests. Users that all start at t = 0 with identical
  lengths stay in lock-step in a deterministic engine and inflate TTFT several-fold.
- Warm-up: the first `warmup` indices run (they load the engine) but never enter the
  statistics: one request per user in closed loop (the ramp-up round), and a tenth of the
  measured count in open loop (the queue filling from empty).
- Sizing: see `Workload.measured_requests` (at least 200 measured requests, so P99 rests on
  two samples beyond it, and at least 4 measured requests per closed-loop user).
- Lengths: fixed, uniform +-`length_spread` around the means, or drawn with replacement from
  empirical (input, output) pairs. Draw order is fixed (lengths, then arrivals or phases), so
  the same seed gives the same trace whatever the backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

if TYPE_CHECKING:
    from tuner.bench.trace import BlockHashes
    from tuner.specs import Workload

__all__ = ["ArrivalPlan", "TraceOptions", "plan_arrivals", "plan_workload", "sample_lengths"]


@dataclass(frozen=True)
class ArrivalPlan:
    """A seeded request trace: lengths, open-loop arrivals or closed-loop user phases, warm-up."""

    input_tokens: np.ndarray  # int64, per request
    output_tokens: np.ndarray  # int64, per request
    arrival_s: np.ndarray | None  # open loop: send times, sorted, first = 0; None = closed loop
    user_phase: np.ndarray | None  # closed loop: start of user u as a fraction of the ramp
    warmup: int = 0  # requests [0, warmup) run but are excluded from statistics
    # A trace's prompt contents as block hash ids (bench.trace); None: no reuse is modelled.
    blocks: BlockHashes | None = None

    @property
    def count(self) -> int:
        """Requests in the trace, warm-up included."""
        return int(self.input_tokens.shape[0])

    @property
    def users(self) -> int:
        """Closed-loop clients (1 for an open-loop trace)."""
        return 1 if self.user_phase is None else int(self.user_phase.shape[0])

    @property
    def measured(self) -> np.ndarray:
        """Boolean mask of the requests that enter the statistics."""
        mask = np.ones(self.count, dtype=bool)
        mask[: self.warmup] = False
        return mask

    def user_start_s(self, ramp_s: float) -> np.ndarray:
        """Start offset (s) of each closed-loop user when the ramp lasts `ramp_s` seconds."""
        if self.user_phase is None:
            return np.zeros(0)
        return self.user_phase * max(0.0, ramp_s)


def sample_lengths(
    rng: np.random.Generator,
    count: int,
    mean_input: int,
    mean_output: int,
    spread: float,
    pairs: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Input and output lengths: empirical `pairs` (n x 2) with replacement, else mean +- spread."""
    if pairs is not None and len(pairs):
        idx = rng.integers(0, len(pairs), size=count)
        return pairs[idx, 0].astype(np.int64), pairs[idx, 1].astype(np.int64)

    def uniform(mean: int) -> np.ndarray:
        if spread <= 0:
            return np.full(count, mean, dtype=np.int64)
        lo = max(1, int(round(mean * (1 - spread))))
        hi = max(lo, int(round(mean * (1 + spread))))
        return rng.integers(lo, hi + 1, size=count, dtype=np.int64)

    return uniform(mean_input), uniform(mean_output)


class TraceOptions(TypedDict, total=False):
    """The keyword options of `plan_arrivals` (lengths, arrivals, warm-up, seed)."""

    length_spread: float
    rate_rps: float | None
    users: int
    warmup: int
    seed: int
    length_pairs: np.ndarray | None


def plan_arrivals(
    count: int,
    input_tokens: int,
    output_tokens: int,
    *,
    length_spread: float = 0.0,
    rate_rps: float | None = None,
    users: int = 1,
    warmup: int = 0,
    seed: int = 0,
    length_pairs: np.ndarray | None = None,
) -> ArrivalPlan:
    """The trace of `count` requests (warm-up included) for one seed; identical in every backend."""
    rng = np.random.default_rng(seed)
    inputs, outputs = sample_lengths(
        rng, count, input_tokens, output_tokens, length_spread, length_pairs
    )
    warmup = max(0, min(warmup, count - 1)) if count else 0
    if rate_rps is not None:
        arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, size=count))
        if count:
            arrivals -= arrivals[0]  # the first request is sent at t = 0
        return ArrivalPlan(inputs, outputs, arrivals, None, warmup)
    clients = max(1, min(users, count)) if count else max(1, users)
    # Independent uniform phases over the ramp, as users that drifted apart independently have
    # (an evenly spaced layout would be more regular than any real client population and hide
    # the chance collisions of prefills). Sorted, so index order is send order; the first
    # user starts at t = 0.
    phase = np.sort(rng.random(clients))
    phase -= phase[0]
    return ArrivalPlan(inputs, outputs, None, phase, warmup)


def plan_workload(
    workload: Workload, length_pairs: np.ndarray | None, *, count: int | None = None
) -> ArrivalPlan:
    """The trace of `workload` (warm-up + measured requests, or `count` without warm-up)."""
    total = workload.total_requests if count is None else count
    return plan_arrivals(
        total,
        workload.input_tokens,
        workload.output_tokens,
        length_spread=workload.length_spread,
        rate_rps=workload.rate_rps,
        users=workload.users,
        warmup=workload.warmup_count if count is None else 0,
        seed=workload.seed,
        length_pairs=length_pairs,
    )
