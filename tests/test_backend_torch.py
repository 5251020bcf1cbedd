"""The measured torch backend: real timings through get_backend, infeasible instead of raising."""

from __future__ import annotations

import pytest
from _engine_fixtures import tiny_spec

from tuner.backends import get_backend
from tuner.catalog import load_gpu, load_sla
from tuner.specs import Context, EngineConfig, Metrics, Workload


def _ctx(**workload: object) -> Context:
    wl = {"input_tokens": 24, "output_tokens": 6, "concurrency": 3, "num_requests": 6}
    wl.update(workload)
    return Context(
        model=tiny_spec(name="tiny-backend"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla("chat"),
        workload=Workload.model_validate(wl),
    )


def _check_measured(m: Metrics, ctx: Context) -> None:
    assert m.feasible, m.reason
    assert m.backend == "torch"
    n, out = ctx.workload.num_requests, ctx.workload.output_tokens
    assert m.num_requests == n and m.failed_requests == 0
    assert m.extra["output_length_mismatches"] == 0
    assert 0 < m.ttft_ms.p50 <= m.ttft_ms.p99 and m.ttft_ms.mean > 0
    assert m.tpot_ms.p50 > 0 and m.itl_ms.p50 > 0
    assert m.e2e_ms.p50 >= m.ttft_ms.p50
    duration = float(m.extra["duration_s"])  # type: ignore[arg-type]
    assert m.output_tokens_per_s == pytest.approx(n * out / duration)
    assert m.goodput_rps <= m.requests_per_s
    assert m.kv_capacity_tokens > 0 and m.weights_gib > 0


@pytest.mark.parametrize("quant", ["bf16", "int8-wo", "int4-awq"])
def test_closed_loop_measures_every_request(quant: str) -> None:
    ctx = _ctx()
    config = EngineConfig(quantization=quant, max_num_seqs=2, max_num_batched_tokens=32)
    m = get_backend("torch", seed=1).evaluate(config, ctx)
    _check_measured(m, ctx)
    assert m.max_concurrent_seqs <= 2
    assert "kernel_path" in m.extra
    if quant != "bf16":
        assert float(m.extra["quant_kl_divergence"]) > 0  # type: ignore[arg-type]


def test_poisson_arrivals_with_int8_kv_and_speculation() -> None:
    ctx = _ctx(concurrency=None, rate_rps=50.0, num_requests=5)
    config = EngineConfig(
        kv_dtype="int8", num_speculative_tokens=2, draft_model="tiny-backend",
        max_num_seqs=4, max_num_batched_tokens=64,
    )  # fmt: skip
    ctx = ctx.model_copy(update={"draft": ctx.model})
    m = get_backend("torch").evaluate(config, ctx)
    _check_measured(m, ctx)
    # Draft = the same weights int4-quantized: measured acceptance is high but not assumed 1.
    assert 0 < float(m.extra["spec_acceptance_rate"]) <= 1  # type: ignore[arg-type]


def test_unsupported_or_too_big_variants_are_infeasible() -> None:
    backend = get_backend("torch")
    tp = backend.evaluate(EngineConfig(tensor_parallel_size=2), _ctx())
    assert not tp.feasible and "tensor_parallel_size=2" in (tp.reason or "")
    small = get_backend("torch", memory_gib=0.0001).evaluate(EngineConfig(), _ctx())
    assert not small.feasible and "KV cache" in (small.reason or "")
    other_vocab = _ctx().model_copy(update={"draft": tiny_spec(name="d", vocab_size=50)})
    bad = backend.evaluate(EngineConfig(num_speculative_tokens=2, draft_model="d"), other_vocab)
    assert not bad.feasible and "vocab" in (bad.reason or "")


def test_ngram_speculation_is_measured() -> None:
    ctx = _ctx(num_requests=4)
    config = EngineConfig(num_speculative_tokens=3, draft_model="ngram", max_num_seqs=4)
    m = get_backend("torch").evaluate(config, ctx)
    _check_measured(m, ctx)
    assert 0 <= float(m.extra["spec_acceptance_rate"]) <= 1  # type: ignore[arg-type]


def test_missing_weights_directory_is_infeasible(tmp_path: object) -> None:
    m = get_backend("torch", model_path=str(tmp_path)).evaluate(EngineConfig(), _ctx())
    assert not m.feasible and "safetensors" in (m.reason or "")


def test_capacity_search_builds_the_engine_once_and_probes_within_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tuner.backends.torch import TorchBackend
    from tuner.perf.load import ProbeBudget
    from tuner.specs import SLA

    backend = get_backend("torch", device="cpu", threads=1)
    assert isinstance(backend, TorchBackend)
    builds = []
    prepare = backend._prepare
    monkeypatch.setattr(backend, "_prepare", lambda c, x: builds.append(1) or prepare(c, x))
    ctx = _ctx(concurrency=None, num_requests=8).model_copy(
        update={"sla": SLA(ttft_ms=60_000, tpot_ms=10_000)}
    )
    budget = ProbeBudget(max_probes=4, max_seconds=60)
    cap, m = backend.capacity_search(EngineConfig(max_num_seqs=4), ctx, budget=budget)
    assert m.feasible, m.reason
    assert builds == [1]  # one engine for every probe
    assert 2 <= cap.probes <= 4
    assert cap.at_sla is not None and cap.rps_per_gpu > 0
    assert any(not p.meets_sla for p in cap.points) or cap.budget_exhausted
    assert m.num_requests == 8
