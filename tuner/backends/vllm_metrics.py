"""vLLM's /metrics over a measurement: a poller for gauge peaks, counter deltas, histogram means."""

from __future__ import annotations

import threading

import httpx

from tuner.backends import prometheus_text as prom

__all__ = ["MetricsPoller", "acceptance_per_position", "delta", "mean_ms", "server_counters"]

_SCRAPE_TIMEOUT_S = 5.0
_MS_PER_S = 1000.0


class MetricsPoller:
    """Scrapes /metrics: a snapshot before and after, peaks of gauges in between."""

    def __init__(self, url: str, period_s: float):
        self.url = url
        self.period_s = period_s
        self.before: list[prom.Sample] = []
        self.peak_kv_usage = 0.0
        self.peak_running = 0.0
        self.peak_waiting = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def scrape(self) -> list[prom.Sample]:
        """One scrape (empty on any error) that also updates the peaks."""
        try:
            text = httpx.get(self.url, timeout=_SCRAPE_TIMEOUT_S).text
        except httpx.HTTPError:
            return []
        samples = prom.parse(text)
        self.peak_kv_usage = max(
            self.peak_kv_usage, prom.total(samples, "vllm:kv_cache_usage_perc") or 0
        )
        self.peak_running = max(
            self.peak_running, prom.total(samples, "vllm:num_requests_running") or 0
        )
        self.peak_waiting = max(
            self.peak_waiting, prom.total(samples, "vllm:num_requests_waiting") or 0
        )
        return samples

    def start(self) -> None:
        """Take the 'before' snapshot and start polling."""
        self.before = self.scrape()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.scrape()

    def finish(self) -> list[prom.Sample]:
        """Stop polling and take the 'after' snapshot."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.scrape()


def delta(before: list[prom.Sample], after: list[prom.Sample], name: str) -> float | None:
    """How much a counter rose between two scrapes (None when the server does not export it)."""
    end = prom.total(after, name)
    return None if end is None else end - (prom.total(before, name) or 0.0)


def mean_ms(before: list[prom.Sample], after: list[prom.Sample], histogram: str) -> float | None:
    """Exact mean of a seconds histogram over the interval (its _sum / _count deltas), in ms."""
    total_s = delta(before, after, f"{histogram}_sum")
    count = delta(before, after, f"{histogram}_count")
    return None if not count or total_s is None else total_s / count * _MS_PER_S


_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def acceptance_per_position(
    before: list[prom.Sample], after: list[prom.Sample], drafts: float
) -> list[float]:
    """P(draft position i accepted | positions before it were) over the interval, from vLLM's
    per-position counter (empty when the server does not export it).

    Acceptance stops at the first rejected draft token, so the drafts that reached position i
    are those that accepted position i - 1 (all of them for the first). An n-gram proposer may
    propose fewer than k tokens; vLLM does not export per-position proposals, so such a short
    draft counts as reaching the positions it did not propose (a slight under-estimate).
    """
    counts: dict[int, float] = {}
    for samples, sign in ((after, 1.0), (before, -1.0)):
        for s in samples:
            if s.name in (_PER_POS, f"{_PER_POS}_total") and "position" in s.labels:
                pos = int(s.labels["position"])
                counts[pos] = counts.get(pos, 0.0) + sign * s.value
    curve, reached = [], drafts
    for pos in range(len(counts)):
        if pos not in counts:
            return []  # a gap in the positions: not the counter this reads
        accepted = max(0.0, counts[pos])
        curve.append(min(1.0, accepted / reached) if reached > 0 else 0.0)
        reached = accepted
    return curve


def server_counters(
    before: list[prom.Sample], after: list[prom.Sample]
) -> dict[str, float | int | str | bool | None]:
    """vLLM's own counters over the measured requests: spec decode, prefix cache, preemptions."""
    out: dict[str, float | int | str | bool | None] = {}
    drafts = delta(before, after, "vllm:spec_decode_num_drafts")
    draft_tokens = delta(before, after, "vllm:spec_decode_num_draft_tokens")
    accepted = delta(before, after, "vllm:spec_decode_num_accepted_tokens")
    if draft_tokens:
        out["spec_draft_tokens"] = int(draft_tokens)
        out["spec_accepted_tokens"] = int(accepted or 0)
        out["spec_acceptance_rate"] = (accepted or 0) / draft_tokens
    if drafts:
        # vLLM's "mean acceptance length": the verified token plus the accepted drafts per step.
        out["spec_mean_acceptance_length"] = 1 + (accepted or 0) / drafts
        curve = acceptance_per_position(before, after, drafts)
        if curve:
            out["spec_acceptance_per_position"] = ",".join(f"{a:.4f}" for a in curve)
    queries = delta(before, after, "vllm:prefix_cache_queries")
    hits = delta(before, after, "vllm:prefix_cache_hits")
    if queries:
        out["prefix_cache_hit_rate"] = (hits or 0) / queries
    # Counted over the whole load: the in-load warm-up requests run inside the same window.
    for key, name in (
        ("server_prompt_tokens", "vllm:prompt_tokens"),
        ("server_generation_tokens", "vllm:generation_tokens"),
    ):
        value = delta(before, after, name)
        if value is not None:
            out[key] = int(value)
    return out
