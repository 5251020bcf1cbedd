"""Every rule that rejects a variant before it runs, each stated once with the line a user reads.

All paths use these functions: EngineConfig runs the context-free rules when it is built,
`predict` refuses a variant `invalid_reason` names (exit 2), every backend returns it as an
infeasible result, and the search samples only values the single-knob rules allow and prunes
the rest with the same reason. Memory fit is the backend's verdict (the simulator's memory plan,
or the measuring backend's real device), since it depends on what is measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from tuner.knobs.declared import Engine, KVDtype, MoEKernel, Quantization
from tuner.knobs.registry import get
from tuner.knobs.rules import config_reason
from tuner.specs import dense_quantization

if TYPE_CHECKING:
    from tuner.model_spec import ModelSpec
    from tuner.specs import Context, EngineConfig, Workload

__all__ = [
    "MODEL_LEN_MARGIN_TOKENS",
    "MODEL_LEN_ROUND_TOKENS",
    "RULES",
    "Rule",
    "allowed_values",
    "heads_split_reason",
    "invalid_reason",
    "longest_request_tokens",
    "served_model_len",
    "unchunked_reason",
]

# A variant is served with --max-model-len = its workload's longest request plus this margin
# (real tokenizers turn a nominal N-token prompt into a few more), rounded up to this step.
MODEL_LEN_MARGIN_TOKENS = 64
MODEL_LEN_ROUND_TOKENS = 256
# Weight block of block-scaled FP8 checkpoints (DeepSeek-V3, Qwen3-*-FP8: 128 x 128).
FP8_BLOCK = 128


Check = Callable[["EngineConfig", "Context"], "str | None"]


@dataclass(frozen=True)
class Rule:
    """One validity rule: the knobs it reads and the check (None = valid)."""

    reads: tuple[str, ...]
    check: Check
    # A start-up check only vLLM enforces names what replaces it on another engine
    # (benchmarks/silicon.py replays SGLang and TensorRT-LLM rows that did start).
    elsewhere: Check | None = None

    def check_for(self, engine: str) -> Check:
        """The check this rule makes for a variant served by `engine`."""
        return self.check if engine == "vllm" or self.elsewhere is None else self.elsewhere


def _fp8_weights(c: EngineConfig, ctx: Context) -> str | None:
    # Without FP8 tensor cores fp8 only shrinks bytes (weight-only), which int8-wo already covers.
    fp8 = (Quantization.fp8, Quantization.fp8_block)
    if c.quantization in fp8 and not ctx.gpu.supports_fp8:
        return (
            f"{c.quantization.value} weights need FP8 tensor cores; {ctx.gpu.name} has none "
            "(use int8-wo)"
        )
    return None


def _nvfp4_vendor(c: EngineConfig, ctx: Context) -> str | None:
    # NVFP4 kernels (CUTLASS/FlashInfer, and vLLM's FP4 Marlin emulation) are CUDA-only; ROCm
    # engines run the OCP format instead.
    if c.quantization is Quantization.nvfp4 and ctx.gpu.vendor != "nvidia":
        return f"nvfp4 runs on NVIDIA GPUs only; {ctx.gpu.name} is AMD (use mxfp4 or fp8)"
    return None


def _experts_only_format(c: EngineConfig, ctx: Context) -> str | None:
    # A format that quantizes the routed experts only on this GPU (MXFP4 on NVIDIA: vLLM's and
    # SGLang's Mxfp4Config, tuner.perf.precision.dense_quantization) quantizes nothing of a
    # dense model.
    q = c.quantization
    if not ctx.model.is_moe and dense_quantization(q, ctx.gpu) is not q:
        return (
            f"{q.value} quantizes MoE experts only on {ctx.gpu.name} (vLLM's and SGLang's "
            f"Mxfp4Config); {ctx.model.name} is dense (use nvfp4, fp8 or int4-awq)"
        )
    return None


def _marlin_experts(c: EngineConfig, ctx: Context) -> str | None:
    # Marlin for MXFP4 experts is vLLM's VLLM_MXFP4_USE_MARLIN (get_mxfp4_backend, vllm 0.18.0
    # quantization/mxfp4.py); where FP4 math exists vLLM's FlashInfer kernels come first, and
    # int4/int8 weight-only experts run Marlin already.
    if c.moe_kernel == MoEKernel.auto:
        return None
    gpu = ctx.gpu
    if c.engine != Engine.vllm:
        engine = Engine(c.engine).value
        return f"moe-kernel marlin is vLLM's (VLLM_MXFP4_USE_MARLIN); {engine} picks its own"
    if not ctx.model.is_moe:
        return f"moe-kernel marlin picks MoE expert kernels; {ctx.model.name} is dense"
    quant = Quantization(c.quantization)
    if quant is not Quantization.mxfp4 or gpu.vendor != "nvidia" or gpu.supports_fp4:
        return (
            "moe-kernel marlin runs mxfp4 experts weight-only: it needs --quant mxfp4 on an "
            f"NVIDIA GPU without FP4 math (H100, H200, A100, L40S); got {quant.value} "
            f"on {gpu.name}"
        )
    return None


def _block_shards(c: EngineConfig, ctx: Context) -> str | None:
    # Block-scaled FP8 shards whole 128-wide blocks: vLLM refuses a TP shard of an MLP or expert
    # whose width is not a multiple of the block (Fp8LinearMethod / Fp8MoEMethod checks).
    if c.quantization is not Quantization.fp8_block:
        return None
    m, tp = ctx.model, c.tensor_parallel_size
    widths = [(m.intermediate_size, tp)] if m.num_dense_layers else []
    if m.is_moe:
        experts_over = 1 if c.expert_parallel else tp * c.data_parallel_size
        widths.append((m.expert_intermediate_size, experts_over))
    for width, parts in widths:
        if width % parts or (width // parts) % FP8_BLOCK:
            return (
                f"fp8-block needs each shard of the {width}-wide MLP to be a multiple of "
                f"{FP8_BLOCK}; {parts} shards give {width / parts:g}"
            )
    return None


def _fp8_kv(c: EngineConfig, ctx: Context) -> str | None:
    if c.kv_dtype is KVDtype.fp8 and not ctx.gpu.supports_fp8:
        return f"fp8 KV cache needs FP8 support; {ctx.gpu.name} has none (use int8)"
    return None


def _int8_math(c: EngineConfig, ctx: Context) -> str | None:
    if c.quantization is Quantization.int8 and ctx.gpu.int8_tops <= 0:
        return f"int8 w8a8 needs INT8 tensor cores; {ctx.gpu.name} has none (use int8-wo)"
    return None


def _tp_beyond_gpus(c: EngineConfig, ctx: Context) -> str | None:
    if c.tensor_parallel_size > ctx.num_gpus:
        return f"tensor_parallel_size={c.tensor_parallel_size} > {ctx.num_gpus} GPUs available"
    return None


def _replica_beyond_gpus(c: EngineConfig, ctx: Context) -> str | None:
    gpus = c.tensor_parallel_size * c.data_parallel_size
    if gpus > ctx.num_gpus:
        return (
            f"tensor_parallel_size={c.tensor_parallel_size} x data_parallel_size="
            f"{c.data_parallel_size} = {gpus} GPUs > {ctx.num_gpus} GPUs available"
        )
    return None


def _dp_needs_moe(c: EngineConfig, ctx: Context) -> str | None:
    # Attention DP pays off when ranks share MoE layers; for a dense model DP ranks are plain
    # replicas, which `tuner plan` sizes.
    if c.data_parallel_size > 1 and not ctx.model.is_moe:
        return (
            f"data_parallel_size={c.data_parallel_size} (DP attention) needs a MoE model; "
            f"{ctx.model.name} is dense (tuner plan sizes its replicas)"
        )
    return None


def _ep_needs_moe(c: EngineConfig, ctx: Context) -> str | None:
    if c.expert_parallel and not ctx.model.is_moe:
        return f"expert_parallel needs a MoE model; {ctx.model.name} is dense"
    return None


def _ep_splits_experts(c: EngineConfig, ctx: Context) -> str | None:
    # Every GPU holds the same number of whole experts (vLLM's and SGLang's default placement).
    ep = c.tensor_parallel_size * c.data_parallel_size
    experts = ctx.model.num_experts
    if c.expert_parallel and ep == 1:
        return "expert_parallel needs a replica of 2 or more GPUs (TP x DP = 1)"
    if c.expert_parallel and ctx.model.is_moe and experts % ep:
        return f"expert parallel size {ep} (TP x DP) does not divide {experts} experts"
    return None


def _mtp_needs_module(c: EngineConfig, ctx: Context) -> str | None:
    from tuner.specs import MTP

    if c.draft_model == MTP and not ctx.model.num_mtp_layers:
        return (
            f"draft_model mtp speculates with the model's own multi-token-prediction layers; "
            f"{ctx.model.name} has none (num_nextn_predict_layers 0): use ngram or a draft model"
        )
    return None


def heads_split_reason(model: ModelSpec, tp: int) -> str | None:
    """Why `tp` GPUs cannot shard the model's attention heads evenly, or None when they can."""
    # vLLM shards attention heads evenly (ModelConfig.verify_with_parallel_config).
    heads = model.num_attention_heads
    if heads % tp:
        return f"tensor_parallel_size={tp} does not divide {heads} heads"
    return None


def _tp_splits_heads(c: EngineConfig, ctx: Context) -> str | None:
    return heads_split_reason(ctx.model, c.tensor_parallel_size)


def _budget_below_seqs(c: EngineConfig, ctx: Context) -> str | None:
    # vLLM SchedulerConfig refuses max_num_batched_tokens < max_num_seqs (one token per sequence).
    if c.max_num_batched_tokens < c.max_num_seqs:
        return f"max_num_batched_tokens={c.max_num_batched_tokens} < max_num_seqs={c.max_num_seqs}"
    return None


def longest_request_tokens(workload: Workload) -> int:
    """Tokens of the workload's longest request (prompt + output): the lengths file's longest
    pair, else the mean lengths stretched by the spread."""
    pairs = _length_pairs(workload)
    if pairs is not None:
        return int(pairs.sum(axis=1).max())
    mean = workload.input_tokens + workload.output_tokens
    return math.ceil(mean * (1 + workload.length_spread))


def served_model_len(ctx: Context) -> int:
    """The --max-model-len a variant is served with: the longest request plus a margin for
    tokenizer drift, rounded up to MODEL_LEN_ROUND_TOKENS, capped at the model's context."""
    need = longest_request_tokens(ctx.workload) + MODEL_LEN_MARGIN_TOKENS
    rounded = math.ceil(need / MODEL_LEN_ROUND_TOKENS) * MODEL_LEN_ROUND_TOKENS
    return min(rounded, ctx.model.max_context)


def unchunked_reason(config: EngineConfig, max_model_len: int) -> str | None:
    """Why a variant with chunked prefill off cannot serve requests of `max_model_len` tokens.

    vLLM refuses to start with max_num_batched_tokens < max_model_len when chunked prefill is
    off (SchedulerConfig.verify_max_model_len): without chunking a request's whole context
    must fit one step, whatever its length."""
    budget = config.max_num_batched_tokens
    if not config.enable_chunked_prefill and budget < max_model_len:
        return (
            f"chunked prefill off needs max_num_batched_tokens >= max-model-len {max_model_len} "
            f"(the longest request, prompt + output, with margin); got {budget}"
        )
    return None


def _unchunked_budget(c: EngineConfig, ctx: Context) -> str | None:
    return unchunked_reason(c, served_model_len(ctx))


def _unchunked_prompt(c: EngineConfig, ctx: Context) -> str | None:
    # SGLang and TensorRT-LLM start with any budget; without chunking they only need each
    # prompt to fit one step (TensorRT-LLM rejects a longer prompt, SGLang admits it alone).
    pairs = _length_pairs(ctx.workload)
    w = ctx.workload
    prompt = (
        int(pairs[:, 0].max())
        if pairs is not None
        else math.ceil(w.input_tokens * (1 + w.length_spread))
    )
    if not c.enable_chunked_prefill and c.max_num_batched_tokens < prompt:
        return (
            f"chunked prefill off needs max_num_batched_tokens >= the longest prompt {prompt}; "
            f"got {c.max_num_batched_tokens}"
        )
    return None


def _length_pairs(workload: Workload) -> Any:
    from tuner.bench.lengths import workload_length_pairs

    pairs = workload_length_pairs(workload.lengths_file)
    return pairs if pairs is not None and len(pairs) else None


RULES: tuple[Rule, ...] = (
    Rule(("*",), lambda c, ctx: config_reason(c)),
    Rule(("quantization",), _fp8_weights),
    Rule(("kv_dtype",), _fp8_kv),
    Rule(("quantization",), _int8_math),
    Rule(("quantization",), _nvfp4_vendor),
    Rule(("quantization",), _experts_only_format),
    Rule(("moe_kernel", "engine", "quantization"), _marlin_experts),
    Rule(("tensor_parallel_size",), _tp_beyond_gpus),
    Rule(("tensor_parallel_size", "data_parallel_size"), _replica_beyond_gpus),
    Rule(("data_parallel_size",), _dp_needs_moe),
    Rule(("expert_parallel",), _ep_needs_moe),
    Rule(("draft_model",), _mtp_needs_module),
    Rule(("expert_parallel", "tensor_parallel_size", "data_parallel_size"), _ep_splits_experts),
    Rule(
        ("quantization", "tensor_parallel_size", "data_parallel_size", "expert_parallel"),
        _block_shards,
    ),
    Rule(("tensor_parallel_size",), _tp_splits_heads),
    Rule(("max_num_batched_tokens", "max_num_seqs"), _budget_below_seqs),
    Rule(
        ("enable_chunked_prefill", "max_num_batched_tokens", "engine"),
        _unchunked_budget,
        _unchunked_prompt,
    ),
)


def invalid_reason(config: EngineConfig, ctx: Context) -> str | None:
    """Why `config` cannot run under `ctx` (first failing rule), or None when it is valid.

    The variant's `engine` knob says whose checks apply: vLLM's start-up checks on vLLM,
    the physical form of those rules on another engine."""
    engine = config.engine.value
    for rule in RULES:
        reason = rule.check_for(engine)(config, ctx)
        if reason:
            return reason
    return None


def allowed_values(name: str, values: Iterable[Any], ctx: Context) -> tuple[list[Any], list[str]]:
    """The values of one knob that every rule reading only that knob allows, and the reasons
    the others were dropped (the search samples only the former)."""
    from tuner.specs import EngineConfig

    rules = [r for r in RULES if r.reads == (name,)]
    kind = get(name).kind
    kept: list[Any] = []
    dropped: list[str] = []
    for value in values:
        typed = kind(value) if isinstance(kind, type) and issubclass(kind, Enum) else value
        probe = EngineConfig.model_construct(None, **{name: typed})
        reason = next((r for r in (rule.check(probe, ctx) for rule in rules) if r), None)
        if reason:
            dropped.append(reason)
        else:
            kept.append(value)
    return kept, dropped
