"""Replay a planned trace against an in-process Engine and time every request by the wall clock.

The trace (lengths, Poisson arrivals or closed-loop user starts, warm-up) comes from
`tuner.bench.arrivals`, the same as the simulator's and the load generator's for one seed.
Open loop: request i is sent at its arrival time whether or not the engine is busy, so queueing
shows up in TTFT. Closed loop: user u sends request u at its staggered start, then the next
unsent request each time one of its requests finishes.
Each engine step is one streamed chunk per advanced sequence (speculative
steps emit several tokens in one chunk, as vLLM streams them). The device is synchronised before
the clock is read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tuner.bench.arrivals import ArrivalPlan
from tuner.bench.prompts import PlannedRequest
from tuner.bench.stats import RequestResult
from tuner.engine.generate import Engine
from tuner.engine.scheduler import Sequence

__all__ = ["ReplayStats", "replay"]


@dataclass
class ReplayStats:
    """Per-request results plus engine counters observed during the replay."""

    results: list[RequestResult]
    duration_s: float
    max_running: int = 0
    peak_blocks_used: int = 0
    steps: int = 0


def send_times(plan: ArrivalPlan, ramp_s: float) -> list[float]:
    """Planned send time of each request known in advance (inf for closed-loop follow-ups)."""
    if plan.arrival_s is not None:
        return plan.arrival_s.tolist()
    starts = plan.user_start_s(ramp_s).tolist()
    return starts + [float("inf")] * (plan.count - len(starts))


def replay(
    engine: Engine,
    plan: ArrivalPlan,
    requests: list[PlannedRequest],
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
    *,
    ramp_s: float = 0.0,
) -> ReplayStats:
    """Run `requests` through `engine` on the plan's arrivals; time each token."""
    n = len(requests)
    due = send_times(plan, ramp_s)  # closed loop: follow-ups become due as requests finish
    next_req = 0
    results = [RequestResult() for _ in range(n)]
    sent: dict[int, tuple[int, float, float]] = {}  # seq_id -> (request idx, send, last chunk)
    stats = ReplayStats(results=results, duration_s=0.0)
    t0 = clock()

    def send(i: int, at: float) -> None:
        req = requests[i]
        assert isinstance(req.prompt, list)
        seq = engine.add_request(req.prompt, req.output_tokens)
        sent[seq.seq_id] = (i, at, at)
        r = results[i]
        r.input_tokens, r.requested_output_tokens, r.start_s = (
            len(req.prompt),
            req.output_tokens,
            at,
        )

    done = 0
    follow_up = plan.users if plan.arrival_s is None else n  # next closed-loop index to release
    while done < n:
        now = clock() - t0
        while next_req < n and due[next_req] <= now:
            send(next_req, due[next_req])
            next_req += 1
        if not engine.has_work:
            time.sleep(max(0.0, min(due[next_req] - now, 1.0)) if next_req < n else 0.0)
            continue
        advanced = engine.step()
        sync()
        now = clock() - t0
        _record_step(engine, stats, advanced)
        for seq, _count in advanced:
            if _record_chunk(results, sent, seq, now):
                done += 1
                if follow_up < n:
                    due[follow_up] = now  # the user sends its next request right away
                    follow_up += 1
    stats.duration_s = clock() - t0
    return stats


def _record_step(engine: Engine, stats: ReplayStats, advanced: list[tuple[Sequence, int]]) -> None:
    """Engine counters after one step."""
    finished_now = sum(1 for seq, _ in advanced if seq.finished)
    stats.max_running = max(stats.max_running, len(engine.scheduler.running) + finished_now)
    stats.steps += 1
    used = engine.limits.num_blocks - engine.scheduler.allocator.num_free
    stats.peak_blocks_used = max(stats.peak_blocks_used, used)


def _record_chunk(
    results: list[RequestResult],
    sent: dict[int, tuple[int, float, float]],
    seq: Sequence,
    now: float,
) -> bool:
    """Time one streamed chunk of `seq`; True when its request just finished."""
    i, at, last = sent[seq.seq_id]
    r = results[i]
    if r.output_tokens == 0:
        r.ttft_s = now - at
    else:
        r.itl_s.append(now - last)
    r.output_tokens = seq.num_generated
    sent[seq.seq_id] = (i, at, now)
    if not seq.finished:
        return False
    r.success, r.e2e_s = True, now - at
    del sent[seq.seq_id]
    return True
