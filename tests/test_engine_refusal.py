"""What an engine can run is its exporter's options table, asked once: a variant its own engine
cannot launch is infeasible in every backend, with that engine's words."""

from __future__ import annotations

import pytest

from tuner.backends import get_backend
from tuner.catalog import load_gpu, load_model, load_sla
from tuner.export.dispatch import engine_refusal
from tuner.specs import Context, Engine, EngineConfig, KVDtype, Workload

pytestmark = pytest.mark.unit


def _ctx() -> Context:
    return Context(
        model=load_model("llama-3.1-8b"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla("chat"),
        workload=Workload(num_requests=20),
    )


def test_an_engine_refuses_what_its_options_table_cannot_spell() -> None:
    ctx = _ctx()
    sglang_int8 = EngineConfig(engine=Engine.sglang, kv_dtype=KVDtype.int8)
    reason = engine_refusal(sglang_int8, ctx)
    assert reason is not None and "SGLang" in reason and "int8" in reason
    assert engine_refusal(EngineConfig(engine=Engine.vllm, kv_dtype=KVDtype.int8), ctx) is None
    metrics = get_backend("sim").evaluate(sglang_int8, ctx)
    assert not metrics.feasible and metrics.reason == reason


def test_trtllm_refuses_attention_tp_inside_dp_ranks() -> None:
    ctx = _ctx().model_copy(update={"model": load_model("qwen3-30b-a3b"), "num_gpus": 8})
    cfg = EngineConfig(engine=Engine.trtllm, tensor_parallel_size=2, data_parallel_size=2)
    reason = engine_refusal(cfg, ctx)
    assert reason is not None and "TensorRT-LLM" in reason
    assert engine_refusal(cfg.model_copy(update={"engine": Engine.vllm}), ctx) is None
