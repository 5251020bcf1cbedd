"""Per-request timings -> `Metrics`, aggregated exactly as vLLM's `bench serve` does.

Definitions (vllm/benchmarks/serve.py, `calculate_metrics`):
- TTFT: time from sending the request to the first streamed chunk that carries choices.
- ITL: the gap between consecutive content chunks, pooled over all requests (one entry per
  chunk, so a chunk carrying several speculative tokens is one gap).
- TPOT: (E2E - TTFT) / (output tokens - 1), only for requests with more than one output token.
- E2E: time from sending to the last content chunk.
- Throughputs divide by the benchmark duration (first send to last completion); failed requests
  add no tokens. Goodput counts successful requests meeting every SLO (TPOT of a one-token
  request counts as 0).
- Percentiles use numpy's default linear interpolation; every latency is reported in ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Required, TypedDict, Unpack

import numpy as np

from tuner.errors import printable
from tuner.metrics import percentiles_ms
from tuner.sla import requests_meet_sla
from tuner.specs import SLA, Metrics

__all__ = [
    "BUDGET_CUT",
    "TTFT_FIRST_HALF",
    "TTFT_SECOND_HALF",
    "RequestResult",
    "aggregate",
    "aggregate_steady",
    "peak_decoding",
    "summarize_failures",
    "ttft_halves_ms",
]


# Metrics.extra key of a load the time budget stopped early (`LoadOptions.deadline`): its numbers
# cover only what finished in time, so a capacity search takes no point from it.
BUDGET_CUT = "budget_cut"
# Metrics.extra keys of the measured window's TTFT trend (`ttft_halves_ms`).
TTFT_FIRST_HALF, TTFT_SECOND_HALF = "ttft_first_half_p50_ms", "ttft_second_half_p50_ms"
# Fewer requests per half than this say nothing about a trend.
_MIN_HALF = 4


@dataclass
class RequestResult:
    """What one streamed request measured (seconds, tokens) or why it failed."""

    success: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    requested_output_tokens: int = 0
    ttft_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float = 0.0
    error: str | None = None
    start_s: float = 0.0  # when it was sent, seconds since the load started
    cut: bool = False  # the time budget ended it: left out of the statistics, not a failure

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first; None for one-token outputs."""
        if not self.success or self.output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def summarize_failures(results: Sequence[RequestResult]) -> str:
    """Failure reasons with counts, most common first: 'timeout after 30 s x2; HTTP 500 x1'."""
    # An error may quote the server (an error body, a stream line): escaped where it becomes the
    # reason the terminal, trials.csv and the report show.
    reasons = Counter(printable(r.error or "unknown error") for r in results if not r.success)
    return "; ".join(f"{reason} x{n}" for reason, n in reasons.most_common())


def aggregate(
    results: Sequence[RequestResult],
    duration_s: float,
    *,
    backend: str,
    sla: SLA | None = None,
    num_gpus: int = 1,
) -> Metrics:
    """Summarize measured requests the way `vllm bench serve` does; infeasible if none succeeded."""
    ok = [r for r in results if r.success]
    failed = len(results) - len(ok)
    extra: dict[str, float | int | str | bool | None] = {}
    if failed:
        extra["failure_reasons"] = summarize_failures(results)
    short = [r for r in ok if r.output_tokens != r.requested_output_tokens]
    extra["output_length_mismatches"] = len(short)
    dur = max(duration_s, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.input_tokens for r in ok)
    metrics = Metrics(
        backend=backend,
        ttft_ms=percentiles_ms([r.ttft_s for r in ok]),
        tpot_ms=percentiles_ms([t for r in ok if (t := r.tpot_s) is not None]),
        itl_ms=percentiles_ms([gap for r in ok for gap in r.itl_s]),
        e2e_ms=percentiles_ms([r.e2e_s for r in ok]),
        output_tokens_per_s=out_tokens / dur,
        output_tokens_per_s_per_gpu=out_tokens / dur / max(num_gpus, 1),
        total_tokens_per_s=(in_tokens + out_tokens) / dur,
        requests_per_s=len(ok) / dur,
        goodput_rps=int(
            requests_meet_sla([r.ttft_s for r in ok], [r.tpot_s or 0.0 for r in ok], sla).sum()
        )
        / dur,
        num_requests=len(results),
        failed_requests=failed,
        extra=extra,
    )
    metrics.extra["duration_s"] = duration_s
    if not ok:
        metrics.feasible = False
        metrics.reason = f"all {len(results)} requests failed: {extra.get('failure_reasons', '')}"
    return metrics


class Labels(TypedDict, total=False):
    """The keyword arguments of `aggregate` that say whose measurement it is and how it is read."""

    backend: Required[str]
    sla: SLA | None
    num_gpus: int


def aggregate_steady(
    results: Sequence[RequestResult], warmup: int, **labels: Unpack[Labels]
) -> Metrics:
    """`aggregate` over the measured requests only (indices >= `warmup`, by send order).

    The duration is the measured window: first measured send to last measured completion.
    """
    warmup = max(0, min(warmup, len(results) - 1))
    measured = list(results[warmup:])
    if measured:
        start = min(r.start_s for r in measured)
        end = max(r.start_s + r.e2e_s for r in measured)
    else:
        start = end = 0.0
    metrics = aggregate(measured, end - start, **labels)
    metrics.warmup_requests = warmup
    metrics.extra.update(ttft_halves_ms(measured))
    # Over the whole load, warm-up included: the server's own gauges see those requests too.
    metrics.max_concurrent_seqs = peak_decoding(results)
    metrics.extra["client_peak_decoding"] = metrics.max_concurrent_seqs
    return metrics


def ttft_halves_ms(measured: Sequence[RequestResult]) -> dict[str, float]:
    """Median TTFT (ms) of the first and the second half of the measured requests, in send
    order: a queue that grows without bound shows as a second half slower than the first."""
    ok = sorted((r for r in measured if r.success), key=lambda r: r.start_s)
    if len(ok) < 2 * _MIN_HALF:
        return {}
    half = len(ok) // 2
    first = [r.ttft_s for r in ok[:half]]
    second = [r.ttft_s for r in ok[half:]]
    return {
        TTFT_FIRST_HALF: round(float(np.median(first)) * 1e3, 3),
        TTFT_SECOND_HALF: round(float(np.median(second)) * 1e3, 3),
    }


def peak_decoding(results: Sequence[RequestResult]) -> int:
    """Most requests streaming at once (first token seen, not finished), as the client saw them.

    A request between its first token and its last is in the server's running batch, so this is
    a lower bound on the server's peak running count that no sampling interval can miss.
    """
    events: list[tuple[float, int]] = []
    for r in results:
        begin, end = r.start_s + r.ttft_s, r.start_s + r.e2e_s
        if r.success and r.output_tokens > 1 and end > begin:
            events += [(begin, 1), (end, -1)]
    peak = running = 0
    # At equal times an end (-1) sorts first: one request ending as another starts never overlaps.
    for _, step in sorted(events):
        running += step
        peak = max(peak, running)
    return peak
