"""The lines `predict` and the tune summary print about a trace replay and its prefix cache."""

from __future__ import annotations

from collections.abc import Mapping

from tuner.bench.protocols import protocol_line
from tuner.bench.trace_plan import workload_trace
from tuner.perf.prefix_sim import prefix_cache_text
from tuner.specs import Workload

__all__ = ["load_lines", "trace_lines"]


def trace_lines(
    extra: Mapping[str, object], wl: Workload, replica_gpus: int, *, searched: bool = False
) -> list[str]:
    """What was replayed (requests, recorded span, speedup) and the capacity as a speedup;
    `searched`: the rate was the capacity search's, not the workload's."""
    trace = workload_trace(wl)
    if trace is None:
        return []
    native = trace.native_rate_rps
    what = f"trace {trace.source}: {trace.count} requests over {trace.duration_s:,.0f} s"
    if native is None:
        lines = [what + " (all sent at once)"]
    elif searched:
        lines = [what + f" ({native:.2f} req/s recorded)"]
    elif wl.rate_rps is not None:
        lines = [what + f" ({native:.2f} req/s), replayed {wl.rate_rps / native:.2f}x faster"]
    else:
        lines = [what + f", sent in order by {wl.users} closed-loop users (times not replayed)"]
    capacity = extra.get("capacity_rps_per_gpu")
    if native is not None and isinstance(capacity, float | int):
        rps = capacity * replica_gpus
        lines.append(
            f"trace capacity: {rps / native:.2f}x the recorded speed ({rps:.2f} req/s per replica)"
        )
    if cache := prefix_cache_text(extra):
        lines.append(cache)
    elif trace.blocks is not None:
        lines.append("prefix cache: off in this variant (repeated blocks are computed again)")
    return lines


def load_lines(extra: Mapping[str, object], wl: Workload, replica_gpus: int) -> list[str]:
    """How the load was sent: the trace replayed, else the client protocol's line."""
    return trace_lines(extra, wl, replica_gpus) or [protocol_line(wl)]
