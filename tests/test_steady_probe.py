"""Measured capacity probes (issue 34, item 3 and 4): sized from the service time, a growing queue
misses the SLA, a noisy miss is measured again before it halves the bracket, and the capacity
carries the spread of its repeated decisive probe. A fake engine stands in for the server."""

from __future__ import annotations

import pytest

from tuner import catalog
from tuner.backends.steady_probe import SteadyProbe, queue_growing
from tuner.bench.stats import TTFT_FIRST_HALF, TTFT_SECOND_HALF
from tuner.perf.capacity import measured_capacity
from tuner.perf.load import ProbeBudget
from tuner.sla import UNSTABLE_QUEUE, meets_sla
from tuner.specs import SLA, Context, EngineConfig, Metrics, Percentiles, Workload

pytestmark = pytest.mark.unit

SLA_ = SLA(ttft_ms=1000, tpot_ms=200)
SERVICE_MS = 1500.0


def _ctx() -> Context:
    return Context(
        model=catalog.load_model("smollm2-135m"),
        gpu=catalog.load_gpu("h200-sxm"),
        sla=SLA_,
        workload=Workload(input_tokens=256, output_tokens=64),
        num_gpus=1,
    )


def _metrics(ttft_ms: float, first: float | None = None, second: float | None = None) -> Metrics:
    extra: dict[str, float | int | str | bool | None] = {}
    if first is not None and second is not None:
        extra = {TTFT_FIRST_HALF: first, TTFT_SECOND_HALF: second}
    return Metrics(
        backend="fake",
        ttft_ms=Percentiles(mean=ttft_ms, p50=ttft_ms, p90=ttft_ms, p95=ttft_ms, p99=ttft_ms),
        tpot_ms=Percentiles(mean=50, p50=50, p90=50, p95=50, p99=50),
        e2e_ms=Percentiles(p50=SERVICE_MS, mean=SERVICE_MS),
        requests_per_s=1.0,
        output_tokens_per_s=64.0,
        output_tokens_per_s_per_gpu=64.0,
        extra=extra,
    )


class FakeEngine:
    """Serves up to `capacity_rps` with a flat TTFT; above it the queue grows through the window
    (the percentiles of a short window still look fine); `noisy` loads miss on their first run."""

    def __init__(self, capacity_rps: float, noisy: tuple[float, ...] = ()) -> None:
        self.capacity_rps, self.noisy = capacity_rps, set(noisy)
        self.seen: list[Workload] = []

    def __call__(self, at: Context) -> Metrics:
        wl = at.workload
        self.seen.append(wl)
        if wl.rate_rps is None:  # the service-time requests, one user
            return _metrics(300.0)
        if wl.rate_rps in self.noisy:
            self.noisy.discard(wl.rate_rps)  # a slow moment of the shared host, once
            return _metrics(1300.0, 300.0, 320.0)
        if wl.rate_rps <= self.capacity_rps:
            return _metrics(400.0, 300.0, 330.0)
        # Over a 60 s window the queue gains (rate - capacity) x 60 requests, each waiting
        # 1 / capacity s more (~20 s per req/s of overload at 3 req/s).
        growth_ms = 60e3 * (wl.rate_rps - self.capacity_rps) / self.capacity_rps
        return _metrics(900.0, 300.0, 300.0 + growth_ms)


def test_probe_is_sized_from_the_service_time() -> None:
    engine = FakeEngine(capacity_rps=4.0)
    probe = SteadyProbe(engine, SLA_, "rate", service_times=40, min_requests=30)
    ctx = _ctx()
    probe(ctx.model_copy(update={"workload": ctx.workload.model_copy(update={"rate_rps": 2.0})}))
    assert engine.seen[0].concurrency == 1 and engine.seen[0].num_requests == 3  # timed alone
    assert probe.service_s == pytest.approx(1.5)
    sized = engine.seen[1]
    assert sized.num_requests == 120  # 2 req/s x 40 service times of 1.5 s
    assert sized.warmup_requests is not None and sized.warmup_requests >= 3  # 2 x 1.5 in flight
    fixed = ctx.workload.model_copy(update={"rate_rps": 2.0, "num_requests": 7})
    probe(ctx.model_copy(update={"workload": fixed}))
    assert engine.seen[-1].num_requests == 7  # counts the user fixed are sent as given


def test_a_growing_queue_misses_the_sla_however_good_its_percentiles() -> None:
    growing = _metrics(900.0, 300.0, 4300.0)
    assert queue_growing(growing, service_s=1.5)
    assert not queue_growing(_metrics(900.0, 300.0, 700.0), service_s=1.5)  # under one service
    assert not queue_growing(_metrics(900.0), service_s=1.5)  # no halves: no verdict
    assert meets_sla(growing, SLA_)
    growing.extra[UNSTABLE_QUEUE] = True
    assert not meets_sla(growing, SLA_)
    probe = SteadyProbe(FakeEngine(capacity_rps=2.0), SLA_, "rate")
    ctx = _ctx()
    m = probe(ctx.model_copy(update={"workload": ctx.workload.model_copy(update={"rate_rps": 3})}))
    assert m.extra[UNSTABLE_QUEUE] is True and not meets_sla(m, SLA_)


def test_a_noisy_miss_is_measured_again_and_outvoted() -> None:
    engine = FakeEngine(capacity_rps=4.0, noisy=(2.0,))
    probe = SteadyProbe(engine, SLA_, "rate")
    ctx = _ctx()
    m = probe(ctx.model_copy(update={"workload": ctx.workload.model_copy(update={"rate_rps": 2})}))
    assert meets_sla(m, SLA_) and m.extra["probe_verdicts"] == "miss,pass,pass"
    assert probe.repeats == 2


def test_a_gross_miss_is_not_repeated() -> None:
    def gross(at: Context) -> Metrics:
        return _metrics(300.0 if at.workload.rate_rps is None else 5000.0)

    probe = SteadyProbe(gross, SLA_, "rate")
    ctx = _ctx()
    m = probe(ctx.model_copy(update={"workload": ctx.workload.model_copy(update={"rate_rps": 2})}))
    assert not meets_sla(m, SLA_) and probe.repeats == 0


def _search(engine: FakeEngine, steady: bool) -> tuple[float, SteadyProbe | None]:
    ctx = _ctx()
    budget = ProbeBudget(max_probes=10, rel_tol=0.05)
    probe = SteadyProbe(engine, SLA_, "rate") if steady else None
    cap, _ = measured_capacity(probe or engine, EngineConfig(), ctx, mode="rate", budget=budget)
    if probe is not None:
        probe.confirm(cap, ctx)
    top = cap.at_sla
    return (top.load if top else 0.0), probe


def test_capacity_search_neither_halved_by_noise_nor_fooled_by_a_short_window() -> None:
    # The plain probe: one noisy miss at 2 req/s halves the bracket below the true 3 req/s...
    naive, _ = _search(FakeEngine(capacity_rps=3.0, noisy=(2.0,)), steady=False)
    assert naive < 2.0
    # ...and a load past capacity passes on its percentiles alone (the queue's growth unseen).
    blind = FakeEngine(capacity_rps=3.0)
    assert meets_sla(blind(_ctx().model_copy(update={"workload": Workload(rate_rps=5)})), SLA_)
    found, probe = _search(FakeEngine(capacity_rps=3.0, noisy=(2.0,)), steady=True)
    assert 3.0 * 0.9 <= found <= 3.0 * 1.05  # within the tolerance, and no halving
    assert probe is not None and probe.repeats >= 2


def test_capacity_carries_the_spread_of_its_repeats() -> None:
    ctx = _ctx()
    engine = FakeEngine(capacity_rps=3.0)
    probe = SteadyProbe(engine, SLA_, "rate")
    cap, _ = measured_capacity(probe, EngineConfig(), ctx, mode="rate", budget=ProbeBudget())
    at_cap = probe.confirm(cap, ctx)
    top = cap.at_sla
    assert top is not None and at_cap is probe.runs[top.load]
    assert cap.spread is not None and cap.spread.low_load == top.load
    assert cap.spread.high_load is not None and cap.spread.high_load > top.load
    rel = cap.spread.rel(top.load)
    assert rel is not None and 0 < rel <= 0.1
    assert len(probe.votes[top.load]) == 2  # the capacity probe was measured again


def test_confirm_lowers_a_capacity_whose_repeats_miss() -> None:
    ctx = _ctx()
    engine = FakeEngine(capacity_rps=3.0)
    probe = SteadyProbe(engine, SLA_, "rate")
    cap, _ = measured_capacity(probe, EngineConfig(), ctx, mode="rate", budget=ProbeBudget())
    first = cap.at_sla
    assert first is not None
    engine.capacity_rps = 0.9 * first.load  # the engine turned out slower: repeats miss
    probe.confirm(cap, ctx)
    lowered = cap.at_sla
    assert lowered is not None and lowered.load < first.load
    # The split load bounds nothing: the spread runs from the new capacity to a sure miss above.
    assert cap.spread is not None and cap.spread.low_load == lowered.load
    assert cap.spread.high_load is not None and cap.spread.high_load > first.load
    assert probe.votes[first.load] == [True, False, False]
