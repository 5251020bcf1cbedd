"""Capacity search: the bracketing routine, invariants of the simulator's capacity (hypothesis),
agreement with `tuner predict`, and the frontier's distinct outcomes."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner import catalog
from tuner.backends import evaluate_capacity, get_backend
from tuner.cli import app
from tuner.perf.capacity import find_capacity, sim_capacity
from tuner.perf.load import ProbeBudget
from tuner.search.frontier import capacity_frontier
from tuner.search.trials import TrialRecord
from tuner.specs import SLA, Context, EngineConfig, Metrics, Percentiles, Workload

pytestmark = pytest.mark.unit

# The capacity search stops when its bracket is this narrow (ProbeBudget.rel_tol): two searches
# of the same boundary agree within it, so invariants are checked up to it.
TOL = ProbeBudget().rel_tol


def _flat(v: float) -> Percentiles:
    return Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v)


def _queue_probe(knee: float):  # noqa: ANN202
    """Latency of an M/M/1-like server with service rate `knee`: grows without bound near it."""

    def probe(load: float) -> Metrics:
        rho = min(load / knee, 0.999)
        return Metrics(ttft_ms=_flat(100 / (1 - rho)), tpot_ms=_flat(10.0),
                       requests_per_s=load, output_tokens_per_s_per_gpu=100 * load)  # fmt: skip

    return probe


def test_bisection_finds_the_sla_boundary_within_tolerance() -> None:
    # TTFT = 100 / (1 - load/50) <= 500 ms  <=>  load <= 40
    cap, failed = find_capacity(_queue_probe(50), SLA(ttft_ms=500), mode="rate", low=0.5,
                                high=60.0)  # fmt: skip
    assert failed is None and cap.at_sla is not None
    assert 40 * (1 - TOL) <= cap.at_sla.load <= 40
    # The headroom point keeps TTFT <= 450 ms: load <= 38.9
    assert cap.operating is not None and cap.operating.load <= 50 * (1 - 100 / 450)
    assert cap.probes <= ProbeBudget().max_probes


def test_growth_brackets_without_a_saturation_estimate_and_respects_the_budget() -> None:
    budget = ProbeBudget(max_probes=6)
    cap, _ = find_capacity(_queue_probe(50), SLA(ttft_ms=500), mode="rate", low=0.5, budget=budget)
    assert cap.probes <= 6
    assert cap.at_sla is not None and cap.at_sla.load <= 40
    assert any(not p.meets_sla for p in cap.points)  # the boundary was bracketed


def test_users_mode_searches_integers() -> None:
    cap, _ = find_capacity(_queue_probe(50), SLA(ttft_ms=500), mode="users", low=1, high=64)
    assert cap.at_sla is not None and cap.at_sla.load in (39, 40)  # 40 sits on the bound
    assert all(p.load == int(p.load) for p in cap.points)


def test_open_loop_probes_warm_up_for_a_batch_filling_unless_the_counts_are_given() -> None:
    from tuner.perf.load import steady_sized

    wl = Workload(rate_rps=40.0)
    assert steady_sized(wl, 3.2) == wl.model_copy(
        update={"warmup_requests": wl.warmup_count, "num_requests": wl.measured_requests}
    )
    big = steady_sized(wl, 450.2)
    assert big.warmup_requests == 451 and big.num_requests == 451
    fixed = Workload(rate_rps=40.0, num_requests=50)
    assert steady_sized(fixed, 450.2) == fixed


def test_open_loop_capacity_never_exceeds_the_saturated_rate() -> None:
    # A flat probe meets the SLA at any load, as a short finite probe past saturation can: the
    # capacity still stops at the saturated rate (`high`), and operating keeps the headroom.
    cap, _ = find_capacity(lambda load: _queue_probe(1e9)(load), SLA(ttft_ms=500), mode="rate",
                           low=0.5, high=40.0)  # fmt: skip
    assert cap.at_sla is not None and cap.at_sla.load == 40.0
    assert max(p.load for p in cap.points) <= 40.0
    assert cap.operating is not None and cap.operating.load <= 40.0 * (1 - cap.headroom)


def _ctx(gpu: str = "h200-sxm", sla: SLA | None = None, **gpu_scale: float) -> Context:
    profile = catalog.load_gpu(gpu)
    if gpu_scale:
        profile = profile.model_copy(update={k: getattr(profile, k) * v
                                             for k, v in gpu_scale.items()})  # fmt: skip
    return Context(model=catalog.load_model("llama-3.1-8b"), gpu=profile,
                   sla=sla or catalog.load_sla("chat"),
                   workload=Workload(num_requests=60, output_tokens=128))  # fmt: skip


CONFIGS = st.builds(
    EngineConfig,
    quantization=st.sampled_from(["bf16", "fp8", "int4-awq"]),
    kv_dtype=st.sampled_from(["auto", "fp8"]),
    max_num_seqs=st.sampled_from([8, 32, 128]),
    max_num_batched_tokens=st.sampled_from([1024, 4096]),
)
SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(config=CONFIGS)
def test_sim_capacity_is_at_most_the_saturated_burst_rate(config: EngineConfig) -> None:
    from tuner.perf.load import workload_at
    from tuner.perf.predict import predict_metrics

    ctx = _ctx(sla=SLA(ttft_ms=1e6, tpot_ms=1e6))  # no latency bound binds: throughput does
    cap, _ = sim_capacity(config, ctx)
    wl = ctx.workload
    burst = workload_at(wl, "users", wl.measured_requests).model_copy(
        update={"warmup_requests": 0, "ramp_s": 0.0}
    )
    saturated = predict_metrics(config, ctx, workload=burst)
    if cap.at_sla is not None:
        assert cap.at_sla.load <= saturated.requests_per_s * (1 + 1e-9)


@SLOW
@given(config=CONFIGS, ttft=st.floats(100, 2000), tpot=st.floats(5, 80), loosen=st.floats(1, 3))
def test_capacity_never_falls_when_the_sla_loosens(
    config: EngineConfig, ttft: float, tpot: float, loosen: float
) -> None:
    tight, _ = sim_capacity(config, _ctx(sla=SLA(ttft_ms=ttft, tpot_ms=tpot)))
    loose, _ = sim_capacity(config, _ctx(sla=SLA(ttft_ms=ttft * loosen, tpot_ms=tpot * loosen)))
    assert loose.rps_per_gpu >= tight.rps_per_gpu * (1 - TOL)


@SLOW
@given(config=CONFIGS, more=st.floats(1.0, 3.0))
def test_capacity_never_falls_when_memory_grows(config: EngineConfig, more: float) -> None:
    base, _ = sim_capacity(config, _ctx("l40s"))
    bigger, _ = sim_capacity(config, _ctx("l40s", memory_gib=more))
    assert bigger.rps_per_gpu >= base.rps_per_gpu * (1 - TOL)


@SLOW
@given(config=CONFIGS, faster=st.floats(1.0, 3.0))
def test_capacity_never_falls_on_a_strictly_faster_gpu(config: EngineConfig, faster: float) -> None:
    scale = {k: faster for k in ("memory_bandwidth_gbps", "fp16_tflops", "fp8_tflops",
                                 "int8_tops", "int4_tops")}  # fmt: skip
    base, _ = sim_capacity(config, _ctx())
    quick, _ = sim_capacity(config, _ctx(**scale))
    assert quick.rps_per_gpu >= base.rps_per_gpu * (1 - TOL)


def test_tune_capacity_agrees_with_predict_for_fp8_weights_and_kv() -> None:
    out = CliRunner().invoke(app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm",
                                   "--quant", "fp8", "--kv-dtype", "fp8", "--json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    predicted = json.loads(out.output)["extra"]["capacity_rps_per_gpu"]
    ctx = Context(
        model=catalog.load_model("llama-3.1-8b"),
        gpu=catalog.load_gpu("h200-sxm"),
        sla=catalog.load_sla("chat"),
        workload=Workload(),
    )  # the tune's capacity workload
    config = EngineConfig(quantization="fp8", kv_dtype="fp8")
    cap, metrics = evaluate_capacity(get_backend("sim"), config, ctx)
    assert predicted > 0
    assert cap.rps_per_gpu == pytest.approx(predicted, rel=1e-9)
    assert metrics.extra["capacity_rps_per_gpu"] == pytest.approx(predicted, rel=1e-9)


def _record(number: int, seqs: int, cap_json: dict) -> TrialRecord:  # type: ignore[type-arg]
    from tuner.perf.load import Capacity

    cfg = EngineConfig(max_num_seqs=seqs)
    return TrialRecord(number=number, state="complete", params={}, config=cfg,
                       metrics=Metrics(), capacity=Capacity.model_validate(cap_json))  # fmt: skip


def test_variants_with_equal_outcomes_collapse_into_one_row_naming_the_idle_knob() -> None:
    sla = SLA(ttft_ms=500, tpot_ms=50)
    cap, _ = find_capacity(_queue_probe(50), sla, mode="rate", low=0.5, high=60.0)
    data = cap.model_dump(mode="json")
    rows = capacity_frontier([_record(0, 256, data), _record(1, 512, data)], sla)
    assert rows and all(r.variants == [0, 1] for r in rows)
    assert all(r.did_not_matter == {"max_num_seqs": [256, 512]} for r in rows)
    metrics = [(r.output_tokens_per_s_per_gpu, r.tpot_ms, r.ttft_ms) for r in rows]
    assert len(set(metrics)) == len(metrics)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([100.0, 101.0, 150.0]), st.sampled_from([5.0, 5.02, 8.0]),
                  st.sampled_from([1000.0, 1005.0, 2000.0]), st.integers(8, 512)),
        min_size=1, max_size=12,
    )
)  # fmt: skip
def test_frontier_rows_are_distinct_outcomes(rows: list[tuple[float, float, float, int]]) -> None:
    from tuner.perf.load import Capacity, LoadPoint
    from tuner.search.frontier import OUTCOME_TOLERANCE

    records = []
    for i, (ttft, tpot, tput, seqs) in enumerate(rows):
        point = LoadPoint(load=1.0, requests_per_s_per_gpu=1.0, output_tokens_per_s_per_gpu=tput,
                          ttft_ms=_flat(ttft), tpot_ms=_flat(tpot), meets_sla=True,
                          meets_headroom=True)  # fmt: skip
        cap = Capacity(mode="rate", points=[point], probes=1)
        records.append(_record(i, seqs, cap.model_dump(mode="json")))
    front = capacity_frontier(records, SLA(ttft_ms=500, tpot_ms=50))
    assert front and sum(len(r.variants) for r in front) <= len(rows)
    for a in front:
        for b in front:
            if a is not b:
                same = all(abs(x - y) <= OUTCOME_TOLERANCE * max(x, y) for x, y in (
                    (a.ttft_ms, b.ttft_ms), (a.tpot_ms, b.tpot_ms),
                    (a.output_tokens_per_s_per_gpu, b.output_tokens_per_s_per_gpu)))  # fmt: skip
                assert not same


def test_a_backend_without_its_own_search_is_probed_through_evaluate() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _fake_backend import FakeBackend

    backend = FakeBackend()  # load-independent latencies: every probe meets the SLA
    ctx = _ctx(sla=SLA(ttft_ms=10_000, tpot_ms=1_000))
    cap, m = evaluate_capacity(backend, EngineConfig(max_num_seqs=8), ctx,  # type: ignore[arg-type]
                               budget=ProbeBudget(max_probes=3))  # fmt: skip
    assert backend.calls == cap.probes == 3 and cap.budget_exhausted
    assert [p.load for p in cap.points] == [0.5, 2.0, 8.0]
    assert m.extra["capacity_load"] == 8.0 and m.extra["capacity_budget_exhausted"] is True
