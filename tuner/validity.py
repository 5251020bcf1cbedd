"""Rules that reject a variant before any evaluation, each with the reason a user reads."""

from __future__ import annotations

from collections.abc import Callable

from tuner.specs import Context, EngineConfig, KVDtype, Quantization

__all__ = ["RULES", "invalid_reason"]


def _spec_without_draft(c: EngineConfig, ctx: Context) -> str | None:
    # Checked on raw search parameters too (see search.py), since EngineConfig refuses it.
    if c.num_speculative_tokens and not c.draft_model:
        return f"num_speculative_tokens={c.num_speculative_tokens} without a draft model"
    return None


def _fp8_without_hardware(c: EngineConfig, ctx: Context) -> str | None:
    # Without FP8 tensor cores fp8 only shrinks bytes (weight-only / storage-only), which
    # int8-wo weights and the int8 KV cache already cover at the same size.
    if ctx.gpu.supports_fp8:
        return None
    if c.quantization is Quantization.fp8:
        return f"fp8 weights need FP8 tensor cores; {ctx.gpu.name} has none (use int8-wo)"
    if c.kv_dtype is KVDtype.fp8:
        return f"fp8 KV cache needs FP8 support; {ctx.gpu.name} has none (use int8)"
    return None


def _int8_without_hardware(c: EngineConfig, ctx: Context) -> str | None:
    if c.quantization is Quantization.int8 and ctx.gpu.int8_tops <= 0:
        return f"int8 w8a8 needs INT8 tensor cores; {ctx.gpu.name} has none (use int8-wo)"
    return None


def _tp_beyond_gpus(c: EngineConfig, ctx: Context) -> str | None:
    if c.tensor_parallel_size > ctx.num_gpus:
        return f"tensor_parallel_size={c.tensor_parallel_size} > {ctx.num_gpus} GPUs available"
    return None


def _tp_splits_heads(c: EngineConfig, ctx: Context) -> str | None:
    # vLLM shards attention heads evenly (ModelConfig.verify_with_parallel_config).
    heads = ctx.model.num_attention_heads
    if heads % c.tensor_parallel_size:
        return f"tensor_parallel_size={c.tensor_parallel_size} does not divide {heads} heads"
    return None


def _budget_below_seqs(c: EngineConfig, ctx: Context) -> str | None:
    # vLLM SchedulerConfig refuses max_num_batched_tokens < max_num_seqs (one token per sequence).
    if c.max_num_batched_tokens < c.max_num_seqs:
        return f"max_num_batched_tokens={c.max_num_batched_tokens} < max_num_seqs={c.max_num_seqs}"
    return None


def _unchunked_prompt_too_long(c: EngineConfig, ctx: Context) -> str | None:
    # Without chunked prefill a prompt must fit in one step's token budget.
    longest = int(ctx.workload.input_tokens * (1 + ctx.workload.length_spread))
    if not c.enable_chunked_prefill and c.max_num_batched_tokens < longest:
        return (
            f"chunked prefill off and max_num_batched_tokens={c.max_num_batched_tokens} "
            f"< longest prompt {longest}"
        )
    return None


RULES: tuple[Callable[[EngineConfig, Context], str | None], ...] = (
    _spec_without_draft,
    _fp8_without_hardware,
    _int8_without_hardware,
    _tp_beyond_gpus,
    _tp_splits_heads,
    _budget_below_seqs,
    _unchunked_prompt_too_long,
)


def invalid_reason(config: EngineConfig, ctx: Context) -> str | None:
    """Why `config` cannot run under `ctx` (first failing rule), or None when it is valid."""
    for rule in RULES:
        reason = rule(config, ctx)
        if reason:
            return reason
    return None
