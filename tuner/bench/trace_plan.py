"""A workload's requests when they come from a trace (`--trace`) or sessions (`--sessions`).

The trace's requests are replayed in order with their lengths and prompt block ids. Open loop,
the recorded send times are scaled by one speedup so the mean rate is the workload's rate (the
capacity search then finds the highest speedup meeting the SLA, `Trace.speedup`); closed loop,
the users send the trace's requests in order, as `plan_arrivals` does with sampled lengths.
Without a trace every function here defers to `bench.arrivals.plan_workload`, unchanged.
"""

from __future__ import annotations

import numpy as np

from tuner.bench.arrivals import ArrivalPlan, plan_workload
from tuner.bench.lengths import workload_length_pairs
from tuner.bench.sessions import load_sessions
from tuner.bench.trace import Trace
from tuner.bench.trace_file import load_trace
from tuner.errors import InputError
from tuner.specs import OPEN_LOOP_WARMUP_FRACTION, Workload

__all__ = [
    "at_recorded_speed",
    "plan_trace",
    "recorded_rate",
    "trace_workload",
    "with_trace_means",
    "workload_plan",
    "workload_trace",
]


def workload_trace(wl: Workload) -> Trace | None:
    """The trace behind `wl` (its `trace_file` or `sessions`), or None; InputError if bad."""
    if wl.trace_file is not None:
        return load_trace(wl.trace_file)
    if wl.sessions is not None:
        return load_sessions(wl.sessions)
    return None


def with_trace_means(wl: Workload) -> Workload:
    """`wl` with its mean lengths set from its trace (the memory plan and step costs read
    them), checking the trace once where the workload is built; `wl` itself without one."""
    sources = {"--lengths": wl.lengths_file, "--trace": wl.trace_file, "--sessions": wl.sessions}
    given = [flag for flag, value in sources.items() if value is not None]
    if len(given) > 1:  # each one decides the requests' lengths
        raise InputError(f"{' and '.join(given)} are exclusive: give one request source")
    trace = workload_trace(wl)
    if trace is None:
        return wl
    isl, osl = trace.mean_lengths()
    return wl.model_copy(update={"input_tokens": isl, "output_tokens": osl})


def trace_workload(
    isl: int, osl: int, num_requests: int | None, trace: str | None, sessions: str | None
) -> Workload:
    """A workload of fixed lengths, or of `--trace` / `--sessions` (lengths from them)."""
    wl = Workload(
        input_tokens=isl,
        output_tokens=osl,
        num_requests=num_requests,
        trace_file=trace,
        sessions=sessions,
    )
    return with_trace_means(wl)


def recorded_rate(wl: Workload) -> float | None:
    """The mean req/s of `wl`'s trace at its recorded times (None: no trace, or no span)."""
    trace = workload_trace(wl)
    return None if trace is None else trace.native_rate_rps


def at_recorded_speed(wl: Workload) -> Workload:
    """`wl` with its trace's mean lengths, replayed at the recorded times when no load is given."""
    wl = with_trace_means(wl)
    if wl.rate_rps is None and wl.concurrency is None and (rate := recorded_rate(wl)):
        return wl.model_copy(update={"rate_rps": rate})
    return wl


def _warmup(wl: Workload, count: int) -> int:
    if wl.warmup_requests is not None:
        warm = wl.warmup_requests
    elif wl.protocol != "steady":
        warm = 0
    elif wl.is_closed_loop:
        warm = wl.users
    else:
        warm = round(OPEN_LOOP_WARMUP_FRACTION * count)
    # At least half of a trace is measured, however long the queue takes to fill.
    return max(0, min(warm, count // 2))


def plan_trace(wl: Workload, trace: Trace, count: int | None = None) -> ArrivalPlan:
    """`trace` (its first `count` requests) replayed under `wl`'s rate or users."""
    n = trace.count if count is None else max(1, min(count, trace.count))
    idx = np.arange(n)
    blocks = trace.blocks.take(idx) if trace.blocks is not None and n < trace.count else None
    blocks = blocks or trace.blocks
    warmup = 0 if count is not None else _warmup(wl, n)
    inputs, outputs = trace.input_tokens[:n], trace.output_tokens[:n]
    if wl.rate_rps is not None:
        arrivals = trace.arrivals_at(wl.rate_rps)[:n]
        return ArrivalPlan(inputs, outputs, arrivals, None, warmup, blocks)
    rng = np.random.default_rng(wl.seed)
    phase = np.sort(rng.random(max(1, min(wl.users, n))))
    phase -= phase[0]  # as plan_arrivals: independent phases, the first user at t = 0
    return ArrivalPlan(inputs, outputs, None, phase, warmup, blocks)


def workload_plan(wl: Workload, *, count: int | None = None) -> ArrivalPlan:
    """The requests of `wl`: its trace replayed, else `plan_workload` with its lengths file."""
    trace = workload_trace(wl)
    if trace is None:
        return plan_workload(wl, workload_length_pairs(wl.lengths_file), count=count)
    return plan_trace(wl, trace, count)
