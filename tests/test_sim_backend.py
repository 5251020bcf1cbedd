"""The sim backend's contract: registry, never raises, infeasible reasons, capacity search."""

from __future__ import annotations

import pytest

from tuner import catalog
from tuner.backends import Backend, get_backend
from tuner.backends.sim import SimBackend
from tuner.perf.capacity import max_rate_meeting_sla
from tuner.sla import meets_sla
from tuner.specs import SLA, Context, EngineConfig, Workload

pytestmark = pytest.mark.unit


def _ctx(model: str = "llama-3.1-8b", gpu: str = "h200-sxm", **wl: object) -> Context:
    return Context(
        model=catalog.load_model(model),
        gpu=catalog.load_gpu(gpu),
        sla=catalog.load_sla("chat"),
        workload=Workload(**wl),  # type: ignore[arg-type]
        num_gpus=8,
    )


def test_registry_returns_the_sim_backend_with_options() -> None:
    backend = get_backend("sim", seed=5)
    assert isinstance(backend, SimBackend) and isinstance(backend, Backend)
    assert backend.name == "sim" and backend.seed == 5


def test_feasible_metrics_are_complete_and_consistent() -> None:
    m = get_backend("sim").evaluate(EngineConfig(), _ctx(concurrency=16, num_requests=64))
    assert m.feasible and m.reason is None and m.backend == "sim"
    assert m.num_requests == 64
    assert 0 < m.ttft_ms.p50 <= m.ttft_ms.p90 <= m.ttft_ms.p95 <= m.ttft_ms.p99
    assert 0 < m.tpot_ms.p50 <= m.tpot_ms.p99
    assert m.itl_ms.p50 > 0 and m.e2e_ms.p50 > m.ttft_ms.p50
    assert m.total_tokens_per_s > m.output_tokens_per_s > 0
    assert m.output_tokens_per_s_per_gpu == m.output_tokens_per_s
    assert m.goodput_rps <= m.requests_per_s
    assert m.weights_gib > 14 and m.kv_capacity_tokens > 100_000 and m.max_concurrent_seqs == 256
    assert 0 < m.kv_utilization <= 1


def test_seed_changes_poisson_arrivals_deterministically() -> None:
    ctx = _ctx(rate_rps=8.0, num_requests=60, length_spread=0.4)
    a = SimBackend(seed=1).evaluate(EngineConfig(), ctx)
    b = SimBackend(seed=1).evaluate(EngineConfig(), ctx)
    c = SimBackend(seed=2).evaluate(EngineConfig(), ctx)
    assert a == b
    assert a.ttft_ms != c.ttft_ms


def test_405b_bf16_on_one_gpu_is_infeasible_with_the_numbers() -> None:
    m = get_backend("sim").evaluate(EngineConfig(), _ctx("llama-3.1-405b"))
    assert not m.feasible
    assert m.reason and "GiB" in m.reason and "weights need" in m.reason and "tp=1" in m.reason
    assert m.weights_gib > 700


def test_tp_beyond_available_gpus_and_unknown_draft_are_infeasible_not_raised() -> None:
    sim = get_backend("sim")
    ctx = _ctx().model_copy(update={"num_gpus": 2})
    m = sim.evaluate(EngineConfig(tensor_parallel_size=4), ctx)
    assert not m.feasible and m.reason and "> 2 GPUs available" in m.reason
    bad_draft = EngineConfig(num_speculative_tokens=2, draft_model="no-such-draft")
    m = sim.evaluate(bad_draft, _ctx(num_requests=2))
    assert not m.feasible and m.reason and "no-such-draft" in m.reason


def test_tensor_parallel_halves_per_gpu_weights() -> None:
    sim = get_backend("sim")
    tp1 = sim.evaluate(EngineConfig(), _ctx("llama-3.1-70b", "h100-sxm", num_requests=4))
    tp2 = sim.evaluate(
        EngineConfig(tensor_parallel_size=2), _ctx("llama-3.1-70b", "h100-sxm", num_requests=4)
    )
    assert not tp1.feasible
    assert tp2.feasible and tp2.weights_gib < 70


def test_capacity_is_positive_and_tighter_slas_never_allow_more() -> None:
    ctx = _ctx(input_tokens=512, output_tokens=128, num_requests=120)
    loose = ctx.model_copy(update={"sla": SLA(ttft_ms=2000, tpot_ms=100, percentile=95)})
    tight = ctx.model_copy(update={"sla": SLA(ttft_ms=200, tpot_ms=20, percentile=95)})
    cfg = EngineConfig()
    loose_rps = max_rate_meeting_sla(cfg, loose)
    tight_rps = max_rate_meeting_sla(cfg, tight)
    assert loose_rps > 0
    assert tight_rps <= loose_rps
    impossible = ctx.model_copy(update={"sla": SLA(ttft_ms=1, tpot_ms=0.5, percentile=50)})
    assert max_rate_meeting_sla(cfg, impossible) == 0.0


def test_capacity_rate_meets_the_sla_when_replayed() -> None:
    ctx = _ctx(input_tokens=512, output_tokens=128, num_requests=120)
    cfg = EngineConfig()
    rps = max_rate_meeting_sla(cfg, ctx)
    replay = ctx.model_copy(
        update={"workload": ctx.workload.model_copy(update={"rate_rps": rps, "concurrency": None})}
    )
    assert meets_sla(get_backend("sim").evaluate(cfg, replay), ctx.sla)


def test_backend_capacity_option_reports_it_in_extra() -> None:
    ctx = _ctx(input_tokens=256, output_tokens=64, num_requests=60)
    m = SimBackend(capacity=True).evaluate(EngineConfig(), ctx)
    assert m.extra["capacity_rps_per_gpu"] == pytest.approx(
        max_rate_meeting_sla(EngineConfig(), ctx)
    )
