"""Disaggregated serving in the simulator: invariants of the pools, the hand-off and the loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tuner import catalog
from tuner.deployment import Deployment, NodeProfile, Pool
from tuner.errors import InputError
from tuner.perf import disagg
from tuner.perf.efficiency import resolve_efficiency
from tuner.perf.predict import EngineSetup, engine_setup
from tuner.perf.scheduler import RequestSet, SimResult
from tuner.specs import SLA, Context, Engine, EngineConfig, Workload

pytestmark = pytest.mark.unit

GPU = catalog.load_gpu("h100-sxm")
MODEL = catalog.load_model("llama-3.1-8b")
LIMITS = {"max_num_seqs": 64, "max_num_batched_tokens": 4096}


def _ctx(wl: Workload, num_gpus: int = 16) -> Context:
    return Context(model=MODEL, gpu=GPU, sla=SLA(ttft_ms=2000, tpot_ms=60), workload=wl,
                   num_gpus=num_gpus)  # fmt: skip


def _deployment(prefill: int = 2, decode: int = 1, tp: int = 4) -> Deployment:
    config = EngineConfig(tensor_parallel_size=tp, **LIMITS)
    return Deployment(prefill=Pool(workers=prefill, config=config),
                      decode=Pool(workers=decode, config=config))  # fmt: skip


def _node(gbps: float, latency_us: float = 5.0) -> NodeProfile:
    return catalog.load_node("hgx-h100").model_copy(
        update={"nic_gbps": gbps, "nic_latency_us": latency_us}
    )


RATE = Workload(input_tokens=2048, output_tokens=128, rate_rps=6.0, num_requests=120)


@settings(max_examples=12, deadline=None)
@given(slow=st.floats(25, 800), faster=st.floats(1.0, 8.0))
def test_a_faster_link_never_raises_ttft(slow: float, faster: float) -> None:
    ctx, d = _ctx(RATE), _deployment()  # 12 GPUs: more than one 8-GPU NVLink domain
    a = disagg.predict_disagg(d, ctx, node=_node(slow))
    b = disagg.predict_disagg(d, ctx, node=_node(slow * faster))
    assert a.feasible and b.feasible
    assert b.ttft_ms.p50 <= a.ttft_ms.p50 + 1e-9
    assert b.ttft_ms.p99 <= a.ttft_ms.p99 + 1e-9
    assert b.extra["handoff_ms_p50"] <= a.extra["handoff_ms_p50"]


def test_the_handoff_moves_each_shard_over_the_nic_with_its_latency() -> None:
    d, eff = _deployment(), resolve_efficiency(None, GPU)
    link = disagg.handoff_link(d, GPU, _node(400, 7), eff)
    assert link.bytes_per_s == pytest.approx(50e9 * eff.interconnect_fraction)
    # Llama-3.1-8B at TP4: 8 KV heads -> 2 per GPU, 32 layers, K and V of 128 bf16 values each.
    shard = 32 * 2 * 2 * 128 * 2
    moved = disagg.handoff_s(np.array([1000]), MODEL, d, link)
    assert moved[0] == pytest.approx(7e-6 + 1000 * shard / link.bytes_per_s)
    inside = _deployment(prefill=1, decode=1)  # 8 GPUs: one NVLink domain
    assert disagg.handoff_link(inside, GPU, None, eff).name == "NVLink"


def test_more_decode_workers_never_lower_capacity() -> None:
    wl = Workload(input_tokens=512, output_tokens=512, rate_rps=1.0, num_requests=120)
    ctx = _ctx(wl, num_gpus=16)
    totals = []
    for decode in (1, 2):
        d = _deployment(prefill=1, decode=decode, tp=2)
        cap, _m = disagg.disagg_capacity(d, ctx, operating_point=False)
        assert cap.at_sla is not None
        totals.append(cap.rps_per_gpu * d.gpus)
    assert totals[1] >= totals[0]


def _pools(d: Deployment, ctx: Context) -> tuple[EngineSetup, EngineSetup]:
    eff = resolve_efficiency(None, GPU)
    pre = engine_setup(d.prefill.config, ctx, ctx.workload, eff)
    dec = engine_setup(d.decode.config, ctx, ctx.workload, eff)
    assert isinstance(pre, EngineSetup) and isinstance(dec, EngineSetup)
    return pre, dec


def test_a_free_link_never_beats_the_roofline_of_its_pools() -> None:
    ctx, d = _ctx(RATE), _deployment()
    pre, dec = _pools(d, ctx)
    n = 60
    prompts = np.full(n, RATE.input_tokens)
    requests = RequestSet(prompts, np.full(n, RATE.output_tokens), np.linspace(0, 5, n))
    result, prefilled = disagg.simulate_disagg(requests, d, (pre, dec), np.zeros(n))
    # A lone prompt's prefill step, and a decode step of one sequence: nothing runs faster.
    lone_prefill = pre.target.step_s(RATE.input_tokens, 1) + pre.target.prefill_attn_s(
        RATE.input_tokens, 0
    )
    assert np.all(prefilled - requests.arrival_s >= lone_prefill * (1 - 1e-9))
    assert np.all(result.first_token_s >= prefilled)
    fastest_step = dec.target.decode_step_s(1, RATE.input_tokens)
    tpot = (result.finish_s - result.first_token_s) / (RATE.output_tokens - 1)
    assert np.all(tpot >= fastest_step * (1 - 1e-9))
    # The prefill pool cannot serve more prompts per second than its workers' lone prefills.
    span = float(prefilled.max() - requests.arrival_s.min())
    assert n / span <= d.prefill.workers / lone_prefill * (1 + 1e-9)


def _closed_loop(users: int, n: int) -> tuple[SimResult, np.ndarray]:
    """`users` closed-loop users sending `n` 1024/64-token requests through the test deployment."""
    wl = Workload(input_tokens=1024, output_tokens=64, concurrency=users, num_requests=n)
    ctx, d = _ctx(wl), _deployment()
    requests = RequestSet(np.full(n, 1024), np.full(n, 64), None, users=users,
                          user_start_s=np.zeros(users))  # fmt: skip
    return disagg.simulate_disagg(requests, d, _pools(d, ctx), np.full(n, 0.002))


def test_one_closed_loop_user_sends_each_request_when_the_last_one_finishes() -> None:
    result, _ = _closed_loop(users=1, n=6)
    assert np.all(np.isfinite(result.finish_s))
    np.testing.assert_allclose(result.arrival_s[1:], result.finish_s[:-1], atol=1e-4)


def test_closed_loop_predictions_carry_the_deployment_and_its_gpus() -> None:
    wl = Workload(input_tokens=1024, output_tokens=128, concurrency=16, num_requests=96)
    d = _deployment()
    m = disagg.predict_disagg(d, _ctx(wl), node=_node(400))
    assert m.feasible
    assert m.extra["deployment"] == "2P(tp4) + 1D(tp4)"
    assert m.extra["prefill_gpus"] == 8 and m.extra["decode_gpus"] == 4
    assert m.output_tokens_per_s_per_gpu == pytest.approx(m.output_tokens_per_s / 12)


def test_bad_deployments_get_one_clear_line() -> None:
    with pytest.raises(InputError, match="needs 12 GPUs but --num-gpus is 8"):
        disagg.predict_disagg(_deployment(), _ctx(RATE, num_gpus=8), node=_node(400))
    with pytest.raises(InputError, match="pass --node"):
        disagg.predict_disagg(_deployment(), _ctx(RATE), node=None)
    with pytest.raises(ValidationError, match="differ in quantization"):
        Deployment(
            prefill=Pool(workers=1, config=EngineConfig(quantization="fp8")),
            decode=Pool(workers=1, config=EngineConfig()),
        )


def test_a_node_profile_without_a_nic_is_refused(tmp_path: Path) -> None:
    text = Path(catalog.data_dir("node_profiles") / "hgx-h100.yaml").read_text()
    bad = tmp_path / "no-nic.yaml"
    bad.write_text(text.replace("nic_gbps: 400", "nic_gbps: 0"))
    with pytest.raises(InputError, match="nic_gbps"):
        catalog.load_node(str(bad))


def test_every_node_profile_names_a_catalog_gpu() -> None:
    for name in catalog.list_names("node_profiles"):
        node = catalog.load_node(name)
        gpu = catalog.load_gpu(node.gpu)
        assert node.gpus_per_node <= gpu.nvlink_domain
        assert catalog.node_for_gpu(gpu) is not None


def _engine_deployment(engine: Engine) -> Deployment:
    config = EngineConfig(tensor_parallel_size=4, engine=engine, **LIMITS)
    return Deployment(prefill=Pool(workers=1, config=config), decode=Pool(workers=1, config=config))


@pytest.mark.parametrize(
    ("engine", "streams_prefills_token"),
    [(Engine.sglang, True), (Engine.trtllm, True), (Engine.vllm, False)],
)
def test_a_decode_worker_streams_the_prefills_token_or_recomputes_the_last_position(
    engine: Engine, streams_prefills_token: bool
) -> None:
    """SGLang's decode worker streams the prefill worker's token with no forward ("fake extend
    output") and TensorRT-LLM returns a generation-only request's first token on scheduling;
    vLLM recomputes the last prompt position, so its first token comes one step later."""
    ctx, d = _ctx(RATE), _engine_deployment(engine)
    pre, dec = _pools(d, ctx)
    requests = RequestSet(np.array([2048]), np.array([64]), np.zeros(1))
    result, prefilled = disagg.simulate_disagg(requests, d, (pre, dec), np.full(1, 0.003))
    ready = prefilled + 0.003 + dec.limits.request_overhead_s  # the worker's ingress
    if streams_prefills_token:
        np.testing.assert_allclose(result.first_token_s, ready, atol=1e-12)
    else:
        assert result.first_token_s[0] >= ready[0] + dec.target.decode_step_s(1, 2048) * 0.999
    # Every later token is a decode step of the one sequence, whichever way it joined.
    tpot = (result.finish_s - result.first_token_s) / 63
    assert tpot[0] >= dec.target.decode_step_s(1, 2048) * (1 - 1e-9)


def test_an_unconverged_closed_loop_keeps_each_request_after_its_arrival(monkeypatch) -> None:
    """The closed loop's arrivals come from its own completions; when the passes run out
    before they agree, the times reported are those of the last pass simulated."""
    monkeypatch.setattr(disagg, "MAX_PASSES", 1)
    result, prefilled = _closed_loop(users=4, n=24)
    assert np.all(prefilled >= result.arrival_s)
    assert np.all(result.first_token_s >= result.arrival_s)
