"""Capacity probes on a real engine that see an unstable queue and do not trust one noisy run.

A measured capacity search (`tuner.perf.capacity.measured_capacity`) asks for one probe per
load; `SteadyProbe` is that probe for a running server:

* **Sized from the service time.** One request alone (a closed-loop user, `SERVICE_SAMPLES`
  requests) times the service; an open-loop probe then measures at least `service_times` of
  them (and `min_requests`), so that a rate the engine cannot keep up with has time to build a
  queue. A workload whose request counts the user fixed is sent as given.
* **An unstable queue misses the SLA.** When the median TTFT of the second half of the measured
  requests exceeds the first half's by `GROWTH_RATIO` and by more than one service time, the
  queue was still growing at the end: the probe is flagged (`tuner.sla.UNSTABLE_QUEUE`), and
  `meets_sla` fails it however good its percentiles look.
* **A failing verdict is measured again.** Noise on a shared host only slows a probe, so a false
  verdict is a miss: a probe that misses (unless by more than `GROSS_MISS`, which noise does not
  explain) is repeated before it becomes the bracket's top, and a split vote gets a third.
* **The capacity's spread.** After the search, the capacity probe itself is repeated
  (`confirm`); the loads whose every repeat agreed bound the capacity (`CapacitySpread`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from tuner.bench.stats import BUDGET_CUT, TTFT_FIRST_HALF, TTFT_SECOND_HALF
from tuner.perf.load import Capacity, CapacitySpread, LoadMode, workload_at
from tuner.sla import UNSTABLE_QUEUE, meets_sla, sla_violations
from tuner.specs import SLA, Context, Metrics, Workload

__all__ = [
    "GROSS_MISS",
    "GROWTH_RATIO",
    "SERVICE_SAMPLES",
    "SteadyProbe",
    "queue_growing",
]

# Requests timed alone to learn the service time (the median is kept).
SERVICE_SAMPLES = 3
# An open-loop probe lasts at least this many service times (issue 34: 37 s probes of a
# 1.5 s service time on vLLM-CPU passed loads whose queue grew without bound).
DEFAULT_SERVICE_TIMES = 40.0
# Fewest measured requests of a sized probe (P95 of fewer is one or two requests).
DEFAULT_MIN_REQUESTS = 30
# The second half's median TTFT over the first half's above which a queue is growing.
GROWTH_RATIO = 1.5
# A miss by more than this (relative to the bound) is not noise: measured once only.
GROSS_MISS = 1.0


def queue_growing(m: Metrics, service_s: float | None) -> bool:
    """Whether `m`'s waiting time was still growing at the end of its window: the second half's
    median TTFT above the first's by `GROWTH_RATIO` and by more than one service time."""
    first, second = m.extra.get(TTFT_FIRST_HALF), m.extra.get(TTFT_SECOND_HALF)
    if not isinstance(first, (int, float)) or not isinstance(second, (int, float)):
        return False
    floor_ms = (service_s or 0.0) * 1e3
    return second > GROWTH_RATIO * first and second - first > floor_ms


class SteadyProbe:
    """`measure(ctx at a load)` made into a capacity probe: sized, trend-checked, repeated."""

    def __init__(
        self,
        measure: Callable[[Context], Metrics],
        sla: SLA,
        mode: LoadMode,
        *,
        service_times: float = DEFAULT_SERVICE_TIMES,
        min_requests: int = DEFAULT_MIN_REQUESTS,
        deadline: float | None = None,
    ) -> None:
        self.measure, self.sla, self.mode = measure, sla, mode
        self.service_times, self.min_requests = service_times, min_requests
        self.deadline = deadline  # time.monotonic() past which nothing more is measured
        self.service_s: float | None = None
        self.votes: dict[float, list[bool]] = {}  # load -> each measurement's verdict
        self.runs: dict[float, Metrics] = {}  # load -> the Metrics of its majority verdict
        self.repeats = 0

    def __call__(self, at: Context) -> Metrics:
        """One probe of `at`'s load: a failing verdict is measured again (majority of three)."""
        load = _load(at.workload, self.mode)
        if self.service_s is None and self._sized_by_us(at.workload):
            self._time_service(at)
        sized = at.model_copy(update={"workload": self._sized(at.workload)})
        m = self._once(sized, load)
        if not self._doubtful(m):
            return self._keep(load, m)
        self.repeats += 1
        again = self._once(sized, load)
        if again.extra.get(BUDGET_CUT) or not again.feasible:
            return self._keep(load, m)
        if meets_sla(again, self.sla) == meets_sla(m, self.sla):
            return self._keep(load, again)
        self.repeats += 1
        third = self._once(sized, load)
        if third.extra.get(BUDGET_CUT) or not third.feasible:
            return self._keep(load, m)
        return self._keep(load, third)  # a split vote: the third decides, and is the majority

    def confirm(self, cap: Capacity, ctx: Context) -> Metrics | None:
        """Repeat `cap`'s capacity probe (majority of three on a split), lower the capacity when
        the majority misses, and set `cap.spread`; the Metrics at the capacity load after it
        (None when no load meets the SLA any more)."""
        top = cap.at_sla
        if top is not None and not self._spent():
            wl = self._sized(workload_at(ctx.workload, self.mode, top.load))
            at = ctx.model_copy(update={"workload": wl})
            self.repeats += 1
            m = self._once(at, top.load)
            if m.feasible and not m.extra.get(BUDGET_CUT) and not meets_sla(m, self.sla):
                self.repeats += 1
                third = self._once(at, top.load)
                if not meets_sla(third, self.sla):
                    top.meets_sla = top.meets_headroom = False  # the majority missed
        cap.spread = self.spread(cap)
        best = cap.at_sla
        return self.runs.get(best.load) if best is not None else None

    def spread(self, cap: Capacity) -> CapacitySpread:
        """The loads bounding `cap`'s capacity by the unanimous verdicts of every repeat."""
        top = cap.at_sla
        cap_load = top.load if top is not None else 0.0
        sure_pass = [L for L, v in self.votes.items() if all(v) and cap_load >= L]
        sure_fail = [L for L, v in self.votes.items() if not any(v) and cap_load < L]
        return CapacitySpread(
            low_load=max(sure_pass, default=0.0),
            high_load=min(sure_fail, default=None),
            repeats=self.repeats,
        )

    def _sized_by_us(self, wl: Workload) -> bool:
        return self.mode == "rate" and wl.num_requests is None and wl.protocol == "steady"

    def _time_service(self, at: Context) -> None:
        """The service time: the median E2E of `SERVICE_SAMPLES` requests sent one at a time."""
        one = workload_at(at.workload, "users", 1).model_copy(
            update={"num_requests": SERVICE_SAMPLES, "warmup_requests": 0}
        )
        m = self.measure(at.model_copy(update={"workload": one}))
        if m.feasible and not m.extra.get(BUDGET_CUT) and m.e2e_ms.p50 > 0:
            self.service_s = m.e2e_ms.p50 / 1e3

    def _sized(self, wl: Workload) -> Workload:
        """`wl` lasting `service_times` service times at its rate (at least `min_requests`)."""
        if not self._sized_by_us(wl) or self.service_s is None or wl.rate_rps is None:
            return wl
        window_s = self.service_times * self.service_s
        measured = max(self.min_requests, math.ceil(wl.rate_rps * window_s))
        # Little's law: the batch holds rate x service time requests once it is full.
        warmup = max(math.ceil(wl.rate_rps * self.service_s), round(0.1 * measured), 1)
        return wl.model_copy(update={"num_requests": measured, "warmup_requests": warmup})

    def _once(self, at: Context, load: float) -> Metrics:
        m = self.measure(at)
        if not m.feasible or m.extra.get(BUDGET_CUT):
            return m
        if self.service_s is None and m.e2e_ms.p50 > 0:
            self.service_s = m.e2e_ms.p50 / 1e3  # unsized (user-fixed) probes: the lightest load
        if self.mode == "rate" and queue_growing(m, self.service_s):
            m.extra[UNSTABLE_QUEUE] = True
        self.votes.setdefault(load, []).append(meets_sla(m, self.sla))
        return m

    def _doubtful(self, m: Metrics) -> bool:
        """A miss that noise could explain (not a failure, not cut short, not gross)."""
        if not m.feasible or m.extra.get(BUDGET_CUT) or meets_sla(m, self.sla) or self._spent():
            return False
        if m.extra.get(UNSTABLE_QUEUE):
            return True
        return all(v.relative <= GROSS_MISS for v in sla_violations(m, self.sla))

    def _keep(self, load: float, m: Metrics) -> Metrics:
        if m.feasible and not m.extra.get(BUDGET_CUT):
            self.runs[load] = m
            votes = self.votes.get(load, [])
            m.extra["probe_verdicts"] = ",".join("pass" if v else "miss" for v in votes)
        return m

    def _spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def _load(wl: Workload, mode: LoadMode) -> float:
    if mode == "rate":
        return float(wl.rate_rps or 0.0)
    return float(wl.concurrency or 1)
