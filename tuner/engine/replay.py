"""Replay a Workload against an in-process Engine and time every request by the wall clock.

Open loop: request i is sent at its Poisson arrival time whether or not the engine is busy, so
queueing shows up in TTFT. Closed loop: `users` clients each send their next request when the
previous one finishes. Each engine step is one streamed chunk per advanced sequence (speculative
steps emit several tokens in one chunk, as vLLM streams them). The device is synchronised before
the clock is read.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tuner.bench.loadgen import PlannedRequest
from tuner.bench.stats import RequestResult
from tuner.engine.generate import Engine
from tuner.engine.scheduler import Sequence
from tuner.specs import Workload

__all__ = ["ReplayStats", "replay"]


@dataclass
class ReplayStats:
    """Per-request results plus engine counters observed during the replay."""

    results: list[RequestResult]
    duration_s: float
    max_running: int = 0
    peak_blocks_used: int = 0
    steps: int = 0


def _arrival_times(workload: Workload, count: int) -> list[float]:
    if workload.rate_rps is None:
        return [0.0] * count
    rng = random.Random(workload.seed)
    t, times = 0.0, []
    for _ in range(count):
        t += rng.expovariate(workload.rate_rps)
        times.append(t)
    return times


def replay(
    engine: Engine,
    workload: Workload,
    requests: list[PlannedRequest],
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> ReplayStats:
    """Run `requests` through `engine` with the workload's arrival process; time each token."""
    n = len(requests)
    arrivals = _arrival_times(workload, n)
    closed = workload.rate_rps is None
    next_req = 0
    results = [RequestResult() for _ in range(n)]
    sent: dict[int, tuple[int, float, float]] = {}  # seq_id -> (request idx, send, last chunk)
    live: dict[int, Sequence] = {}
    stats = ReplayStats(results=results, duration_s=0.0)
    t0 = clock()

    def send(i: int, at: float) -> None:
        req = requests[i]
        assert isinstance(req.prompt, list)
        seq = engine.add_request(req.prompt, req.output_tokens)
        sent[seq.seq_id] = (i, at, at)
        live[seq.seq_id] = seq
        results[i].input_tokens, results[i].requested_output_tokens = (
            len(req.prompt),
            (req.output_tokens),
        )

    if closed:
        for _ in range(min(workload.users, n)):
            send(next_req, 0.0)
            next_req += 1
    done = 0
    while done < n:
        now = clock() - t0
        while not closed and next_req < n and arrivals[next_req] <= now:
            send(next_req, arrivals[next_req])
            next_req += 1
        if not engine.has_work:
            time.sleep(max(0.0, arrivals[next_req] - now))
            continue
        advanced = engine.step()
        finished_now = sum(1 for seq, _ in advanced if seq.finished)
        stats.max_running = max(stats.max_running, len(engine.scheduler.running) + finished_now)
        sync()
        now = clock() - t0
        stats.steps += 1
        used = engine.limits.num_blocks - engine.scheduler.allocator.num_free
        stats.peak_blocks_used = max(stats.peak_blocks_used, used)
        for seq, _count in advanced:
            i, at, last = sent[seq.seq_id]
            r = results[i]
            if r.output_tokens == 0:
                r.ttft_s = now - at
            else:
                r.itl_s.append(now - last)
            r.output_tokens = seq.num_generated
            sent[seq.seq_id] = (i, at, now)
            if seq.finished:
                r.success, r.e2e_s = True, now - at
                del live[seq.seq_id]
                done += 1
                if closed and next_req < n:
                    send(next_req, now)
                    next_req += 1
    stats.duration_s = clock() - t0
    return stats
