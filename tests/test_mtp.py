"""Speculation with the model's own multi-token-prediction layers (`draft_model: mtp`): refused
for a model without them, priced as one more decoder layer per draft position, held in memory
without a second embedding, exported as each engine names it."""

from __future__ import annotations

import pytest

from tuner import catalog
from tuner.calibration_schema import AcceptanceCurve, Calibration
from tuner.export import sglang, trtllm, vllm
from tuner.perf.memory import embedding_bytes_per_gpu, plan_memory, weight_bytes_per_gpu
from tuner.perf.predict import predict_metrics
from tuner.perf.speculative import acceptance_for, measured_curve
from tuner.specs import (
    DEFAULT_MTP_ACCEPTANCE,
    MTP,
    SLA,
    Context,
    Engine,
    EngineConfig,
    Quantization,
    Workload,
    is_model_draft,
)
from tuner.validity import allowed_values, invalid_reason

pytestmark = pytest.mark.unit

DEEPSEEK = catalog.load_model("deepseek-r1")
B200 = catalog.load_gpu("b200")
WORKLOAD = Workload(input_tokens=1024, output_tokens=256, concurrency=4, num_requests=24)


def _ctx(model: str = "deepseek-r1", workload: Workload = WORKLOAD) -> Context:
    return Context(
        model=catalog.load_model(model), gpu=B200, sla=SLA(name="none"), workload=workload,
        num_gpus=8,
    )  # fmt: skip


def _config(draft: str | None = MTP, k: int = 3, **kw: object) -> EngineConfig:
    base = {"quantization": Quantization.fp8_block, "tensor_parallel_size": 8}
    return EngineConfig(**{**base, "draft_model": draft, "num_speculative_tokens": k, **kw})


def test_a_model_without_mtp_layers_refuses_it_and_the_search_drops_it() -> None:
    ctx = _ctx("llama-3.1-8b")
    reason = invalid_reason(_config(quantization=Quantization.bf16, tensor_parallel_size=1), ctx)
    assert reason is not None and "llama-3.1-8b has none" in reason and "ngram" in reason
    kept, dropped = allowed_values("draft_model", [None, "ngram", MTP], ctx)
    assert kept == [None, "ngram"] and len(dropped) == 1
    assert allowed_values("draft_model", [None, MTP], _ctx())[0] == [None, MTP]
    assert not is_model_draft(MTP)  # nothing to load: the checkpoint carries it


def test_the_mtp_module_is_one_layer_of_the_model_sharing_its_embedding() -> None:
    module = DEEPSEEK.mtp_module()
    assert module is not None and catalog.load_model("llama-3.1-8b").mtp_module() is None
    assert module.num_layers == DEEPSEEK.num_mtp_layers == 1 and module.num_moe_layers == 1
    config = _config()
    with_mtp = plan_memory(DEEPSEEK, B200, config, WORKLOAD, mtp=module)
    plain = plan_memory(DEEPSEEK, B200, _config(None, 0), WORKLOAD)
    extra = weight_bytes_per_gpu(module, config.quantization, B200, 8)
    extra -= embedding_bytes_per_gpu(module, 8)
    assert with_mtp.weights_bytes - plain.weights_bytes == pytest.approx(extra)
    # The module's KV: one more layer's cache per token.
    layers = DEEPSEEK.num_layers
    ratio = with_mtp.kv_bytes_per_token / plain.kv_bytes_per_token
    assert ratio == pytest.approx((layers + 1) / layers)


def test_mtp_cuts_decode_time_at_low_batch_and_costs_a_draft_layer_per_position() -> None:
    ctx = _ctx()
    plain = predict_metrics(_config(None, 0), ctx)
    mtp = predict_metrics(_config(), ctx)
    assert plain.feasible and mtp.feasible
    assert mtp.tpot_ms.mean < 0.7 * plain.tpot_ms.mean
    # With nothing accepted every step still pays three passes of the module: slower than plain.
    refused = ctx.model_copy(
        update={"workload": WORKLOAD.model_copy(update={"acceptance_rate": 0.0})}
    )
    assert predict_metrics(_config(), refused).tpot_ms.mean > plain.tpot_ms.mean


def test_the_default_acceptance_is_the_published_one_and_other_drafts_do_not_stand_in() -> None:
    choice = acceptance_for(MTP, WORKLOAD, None)
    assert choice.per_token == DEFAULT_MTP_ACCEPTANCE and "DeepSeek-V3" in choice.text
    assert not choice.measured
    curve = {"prompts": "chat", "tokens_measured": 100}
    other = AcceptanceCurve(draft="llama-3.2-1b", per_position=[0.6, 0.5], **curve)
    mine = AcceptanceCurve(draft=MTP, per_position=[0.8, 0.7], **curve)
    assert measured_curve(MTP, Calibration.model_construct(acceptance=[other])) is None
    assert measured_curve(MTP, Calibration.model_construct(acceptance=[other, mine])) == mine


def test_each_engine_exports_the_checkpoints_own_mtp_layers() -> None:
    cfg = _config(data_parallel_size=1)
    assert vllm.speculative_config(cfg) == {"method": "mtp", "num_speculative_tokens": 3}
    args = sglang.launch_args(cfg.model_copy(update={"engine": Engine.sglang}), "m")
    assert args[args.index("--speculative-algorithm") + 1] == "EAGLE"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "4"
    assert "--speculative-draft-model-path" not in args  # SGLang reads the model's own layers
    spec = trtllm.extra_options(cfg.model_copy(update={"engine": Engine.trtllm}))
    assert spec["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    # SGLang runs MTP (EAGLE) inside attention-DP ranks; prompt lookup it refuses there.
    dp = {"engine": Engine.sglang, "tensor_parallel_size": 1, "data_parallel_size": 8}
    sglang.launch_args(cfg.model_copy(update=dp), "m")
    with pytest.raises(Exception, match="NGRAM or STANDALONE"):
        sglang.launch_args(_config("ngram").model_copy(update=dp), "m")
