"""MoE, expert/data parallelism, MLA and FP4 in the performance model: invariants and rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.catalog import load_gpu
from tuner.perf.costs import step_cost_model
from tuner.perf.memory import (
    kv_bytes_per_token,
    plan_memory,
    replica_gpus,
    routed_params_per_gpu,
    weight_bytes_per_gpu,
)
from tuner.perf.moe import MoECost, expected_experts_touched
from tuner.perf.precision import precision_for
from tuner.specs import (
    SLA,
    Context,
    EngineConfig,
    KVDtype,
    ModelSpec,
    Quantization,
    Workload,
)
from tuner.validity import invalid_reason

pytestmark = pytest.mark.unit


def moe_spec(**update: object) -> ModelSpec:
    """A DeepSeek-shaped MoE (MLA, shared expert, first dense layer), scaled down."""
    base = {
        "name": "moe-test",
        "hidden_size": 1024,
        "num_layers": 8,
        "num_attention_heads": 16,
        "num_kv_heads": 16,
        "intermediate_size": 4096,
        "moe_intermediate_size": 512,
        "vocab_size": 32000,
        "num_experts": 64,
        "num_experts_per_tok": 6,
        "num_shared_experts": 1,
        "first_k_dense": 1,
        "kv_lora_rank": 256,
        "qk_rope_head_dim": 32,
        "qk_nope_head_dim": 64,
        "v_head_dim": 64,
        "max_context": 32768,
    }
    return ModelSpec.model_validate({**base, **update})


def _moe_cost(tokens_k: int = 8, gpus: int = 8, ep: bool = True, link: float = 4e11) -> MoECost:
    return MoECost(
        num_experts=128, experts_per_token=tokens_k, expert_params=3e8, gpus=gpus,
        expert_parallel=ep, data_parallel=gpus if ep else 1, moe_layers=58,
        bytes_per_param=1.0, gemm_flops_per_s=1e15, weight_bytes_per_s=3e12,
        token_bytes=7168 * 2.0, link_bytes_per_s=link, exchange_latency_s=1e-5,
    )  # fmt: skip


@given(st.integers(1, 256), st.integers(1, 8), st.floats(0, 4096), st.floats(0, 4096))
def test_more_tokens_or_experts_per_token_never_lower_weight_traffic(e, k, t1, t2):
    k = min(k, e)
    lo, hi = sorted((t1, t2))
    assert expected_experts_touched(e, k, lo) <= expected_experts_touched(e, k, hi) + 1e-9
    if k < e:
        assert expected_experts_touched(e, k, hi) <= expected_experts_touched(e, k + 1, hi) + 1e-9
    assert expected_experts_touched(e, k, hi) <= e + 1e-9


@given(st.floats(1, 8192), st.floats(1, 8192))
def test_moe_step_time_never_falls_with_more_tokens(a, b):
    cost = _moe_cost()
    lo, hi = sorted((a, b))
    assert cost.time_s(lo) <= cost.time_s(hi) + 1e-12


@given(st.floats(1, 8192))
def test_a_faster_link_never_predicts_a_slower_expert_exchange(tokens):
    assert _moe_cost(link=8e11).time_s(tokens) <= _moe_cost(link=4e11).time_s(tokens)


@settings(max_examples=40)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]))
def test_expert_parallelism_never_raises_per_gpu_expert_memory(tp, dp):
    model = moe_spec()
    gpu = load_gpu("h200-sxm")
    wl = Workload(input_tokens=512, output_tokens=64)
    plain = EngineConfig(tensor_parallel_size=tp, data_parallel_size=dp)
    ep = plain.model_copy(update={"expert_parallel": True})
    assert (
        plan_memory(model, gpu, ep, wl).weights_bytes
        <= plan_memory(model, gpu, plain, wl).weights_bytes
    )
    # Spreading experts over more GPUs never adds expert bytes to one GPU.
    assert routed_params_per_gpu(model, tp, dp) <= routed_params_per_gpu(model, tp, 1)


@given(st.sampled_from([16, 32, 64, 128]), st.sampled_from([1, 2, 4, 8]))
def test_mla_kv_per_token_is_the_latent_whatever_the_heads(heads, tp):
    model = moe_spec(num_attention_heads=heads, num_kv_heads=heads)
    expected = model.num_layers * (256 + 32) * 2.0
    assert kv_bytes_per_token(model, KVDtype.auto, tp) == expected
    assert model.kv_elements_per_token() == model.num_layers * (256 + 32)


def test_dp_ranks_multiply_the_replica_kv_pool_and_gpus():
    model, gpu = moe_spec(), load_gpu("h200-sxm")
    wl = Workload(input_tokens=512, output_tokens=64)
    one = plan_memory(model, gpu, EngineConfig(tensor_parallel_size=2), wl)
    four = EngineConfig(tensor_parallel_size=2, data_parallel_size=4, expert_parallel=True)
    plan = plan_memory(model, gpu, four, wl)
    assert replica_gpus(four) == 8
    assert plan.kv_capacity_tokens >= 4 * one.kv_capacity_tokens


def test_mla_decode_attention_is_priced_on_the_latent():
    model, gpu = moe_spec(), load_gpu("h200-sxm")
    cost = step_cost_model(model, gpu, EngineConfig())
    heads = model.num_attention_heads
    assert cost.decode_attn_flops_per_ctx == pytest.approx(2 * heads * (288 + 256) * 8)
    assert cost.kv_bytes_per_ctx == pytest.approx(8 * 288 * 2.0)


def test_expert_parallel_decode_is_not_slower_than_tp_sharded_on_one_gpu_set():
    # Same GPUs and bytes; EP exchanges tokens, TP-sharded MoE all-reduces them: both finite,
    # and EP with DP attention shrinks the per-GPU attention work.
    model, gpu = moe_spec(), load_gpu("h200-sxm")
    tp8 = step_cost_model(model, gpu, EngineConfig(tensor_parallel_size=8))
    dp8 = step_cost_model(model, gpu, EngineConfig(data_parallel_size=8, expert_parallel=True))
    assert 0 < dp8.decode_step_s(256, 2048) < float("inf")
    assert dp8.decode_attn_s_per_ctx() < tp8.decode_attn_s_per_ctx() * 8


def test_fp4_paths_per_vendor_and_generation():
    b200 = load_gpu("b200").model_copy(update={"fp4_tflops": 9000.0})
    h100 = load_gpu("h100-sxm")
    assert precision_for(Quantization.nvfp4, b200, 4096).label == "nvfp4-w4a4"
    assert precision_for(Quantization.mxfp4, b200, 4096).label == "mxfp4-w4a8"
    emulated = precision_for(Quantization.nvfp4, h100, 4096)
    assert emulated.weight_only and "emulated" in emulated.label
    assert precision_for(Quantization.nvfp4, h100, 4096).bytes_per_param == pytest.approx(
        0.5 + 1 / 16
    )
    assert weight_bytes_per_gpu(moe_spec(), Quantization.nvfp4, h100, 1) < weight_bytes_per_gpu(
        moe_spec(), Quantization.fp8_block, h100, 1
    )


def _ctx(model: ModelSpec, gpu: str = "h200-sxm", num_gpus: int = 8) -> Context:
    return Context(model=model, gpu=load_gpu(gpu), sla=SLA(), workload=Workload(),
                   num_gpus=num_gpus)  # fmt: skip


def test_parallelism_rules_name_what_is_wrong():
    moe = moe_spec()
    dense = moe_spec(num_experts=0, num_experts_per_tok=0, num_shared_experts=0)
    ep16 = EngineConfig(tensor_parallel_size=2, data_parallel_size=8, expert_parallel=True)
    assert "GPUs available" in (invalid_reason(ep16, _ctx(moe)) or "")
    assert "needs a MoE model" in (
        invalid_reason(EngineConfig(expert_parallel=True), _ctx(dense)) or ""
    )
    assert "DP attention" in (invalid_reason(EngineConfig(data_parallel_size=2), _ctx(dense)) or "")
    odd = moe_spec(num_experts=6, num_experts_per_tok=2)
    assert "does not divide 6 experts" in (
        invalid_reason(EngineConfig(data_parallel_size=4, expert_parallel=True), _ctx(odd)) or ""
    )
    dp8 = EngineConfig(data_parallel_size=8, expert_parallel=True)
    assert invalid_reason(dp8, _ctx(moe)) is None


def test_fp8_block_shards_whole_blocks():
    moe = moe_spec()  # expert width 512: 4 shards of 128 fit, 8 shards of 64 do not
    four = EngineConfig(quantization=Quantization.fp8_block, tensor_parallel_size=4)
    eight = EngineConfig(quantization=Quantization.fp8_block, tensor_parallel_size=8)
    assert invalid_reason(four, _ctx(moe)) is None
    assert "multiple of 128" in (invalid_reason(eight, _ctx(moe)) or "")
    eight_ep = eight.model_copy(update={"expert_parallel": True})
    assert invalid_reason(eight_ep, _ctx(moe)) is None


def test_mxfp4_on_nvidia_quantizes_the_routed_experts_only():
    """vLLM's and SGLang's Mxfp4Config give every linear layer the unquantized method: the dense
    GEMMs of an MXFP4 MoE run (and are stored) in 16 bits; AMD's Quark checkpoints quantize all."""
    from tuner.catalog import load_model
    from tuner.perf.memory import dense_params_per_gpu
    from tuner.perf.precision import dense_quantization

    b200, mi355 = load_gpu("b200"), load_gpu("mi355x")
    assert dense_quantization(Quantization.mxfp4, b200) is Quantization.bf16
    assert dense_quantization(Quantization.mxfp4, mi355) is Quantization.mxfp4
    assert dense_quantization(Quantization.nvfp4, b200) is Quantization.nvfp4
    oss = load_model("gpt-oss-120b")
    stored = weight_bytes_per_gpu(oss, Quantization.mxfp4, b200, 1)
    all_fp4 = weight_bytes_per_gpu(oss, Quantization.mxfp4, mi355, 1)
    fp4 = precision_for(Quantization.mxfp4, b200, oss.hidden_size).bytes_per_param
    assert stored - all_fp4 == pytest.approx(dense_params_per_gpu(oss, 1) * (2.0 - fp4), rel=1e-6)
    # The dense GEMMs compute at the 16-bit rate, the experts on their MXFP4 path.
    cost = step_cost_model(oss, b200, EngineConfig(quantization="mxfp4"))
    bf16 = step_cost_model(oss, b200, EngineConfig(quantization="bf16"))
    assert cost.gemm_flops_per_s == bf16.gemm_flops_per_s
    assert cost.bytes_per_param == bf16.bytes_per_param == 2.0
    assert cost.moe is not None and cost.moe.bytes_per_param == pytest.approx(fp4)
    assert cost.kernel_path == "mxfp4-w4a8 experts, bf16 dense"


def test_mxfp4_on_a_dense_model_is_refused_on_nvidia_with_one_line():
    dense = ModelSpec(name="dense-test", hidden_size=1024, num_layers=4, num_attention_heads=8,
                      num_kv_heads=8, intermediate_size=4096, vocab_size=32000,
                      max_context=8192)  # fmt: skip
    cfg = EngineConfig(quantization="mxfp4")
    reason = invalid_reason(cfg, _ctx(dense, "b200", 1))
    assert reason is not None and "experts only" in reason and "dense-test" in reason
    assert invalid_reason(cfg, _ctx(dense, "mi355x", 1)) is None  # Quark MXFP4 linears
    assert invalid_reason(cfg, _ctx(moe_spec(), "b200", 1)) is None


def test_marlin_experts_are_refused_where_vllm_would_not_run_them_with_one_line():
    marlin = EngineConfig(quantization="mxfp4", moe_kernel="marlin")
    assert invalid_reason(marlin, _ctx(moe_spec(), "h200-sxm", 1)) is None
    cases = [
        (EngineConfig(quantization="mxfp4", moe_kernel="marlin", engine="sglang"), moe_spec(),
         "h200-sxm", "vLLM's"),
        (marlin, moe_spec(num_experts=0, num_experts_per_tok=0, num_shared_experts=0),
         "h200-sxm", "dense"),
        (marlin, moe_spec(), "b200", "without FP4 math"),  # FlashInfer's FP4 kernels there
        (EngineConfig(quantization="fp8", moe_kernel="marlin"), moe_spec(), "h200-sxm", "mxfp4"),
    ]  # fmt: skip
    for cfg, model, gpu, words in cases:
        reason = invalid_reason(cfg, _ctx(model, gpu, 1))
        assert reason is not None and words in reason and "\n" not in reason
