"""Every rule that rejects a variant before it runs, each stated once with the line a user reads.

All paths use these functions: EngineConfig runs the context-free rules when it is built,
`predict` refuses a variant `invalid_reason` names (exit 2), every backend returns it as an
infeasible result, and the search samples only values the single-knob rules allow and prunes
the rest with the same reason. Memory fit is the backend's verdict (the simulator's memory plan,
or the measuring backend's real device), since it depends on what is measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from tuner.knobs.declared import KVDtype, Quantization
from tuner.knobs.registry import Knob, get, registered

if TYPE_CHECKING:
    from tuner.specs import Context

__all__ = ["RULES", "Rule", "allowed_values", "config_reason", "invalid_reason"]


@dataclass(frozen=True)
class Rule:
    """One validity rule: the knobs it reads and the check (None = valid)."""

    reads: tuple[str, ...]
    check: Callable[[Any, Context], str | None]


def _needs_reason(knob: Knob, c: Any) -> str | None:
    # A knob that only acts with another (speculative tokens need a draft model).
    value = getattr(c, knob.name, knob.default)
    if knob.needs and value != knob.default and not getattr(c, knob.needs, None):
        return f"{knob.name}={value} needs a {knob.needs}"
    return None


def _power_of_two_reason(knob: Knob, c: Any) -> str | None:
    value = getattr(c, knob.name, knob.default)
    if knob.power_of_two and (value < 1 or value & (value - 1)):
        return f"{knob.name}={value} is not a power of two"
    return None


def config_reason(c: Any) -> str | None:
    """Why a set of knob values is invalid whatever the hardware (EngineConfig runs this)."""
    for knob in registered():
        reason = _needs_reason(knob, c) or _power_of_two_reason(knob, c)
        if reason:
            return reason
    return None


def _fp8_weights(c: Any, ctx: Context) -> str | None:
    # Without FP8 tensor cores fp8 only shrinks bytes (weight-only), which int8-wo already covers.
    if c.quantization is Quantization.fp8 and not ctx.gpu.supports_fp8:
        return f"fp8 weights need FP8 tensor cores; {ctx.gpu.name} has none (use int8-wo)"
    return None


def _fp8_kv(c: Any, ctx: Context) -> str | None:
    if c.kv_dtype is KVDtype.fp8 and not ctx.gpu.supports_fp8:
        return f"fp8 KV cache needs FP8 support; {ctx.gpu.name} has none (use int8)"
    return None


def _int8_math(c: Any, ctx: Context) -> str | None:
    if c.quantization is Quantization.int8 and ctx.gpu.int8_tops <= 0:
        return f"int8 w8a8 needs INT8 tensor cores; {ctx.gpu.name} has none (use int8-wo)"
    return None


def _tp_beyond_gpus(c: Any, ctx: Context) -> str | None:
    if c.tensor_parallel_size > ctx.num_gpus:
        return f"tensor_parallel_size={c.tensor_parallel_size} > {ctx.num_gpus} GPUs available"
    return None


def _tp_splits_heads(c: Any, ctx: Context) -> str | None:
    # vLLM shards attention heads evenly (ModelConfig.verify_with_parallel_config).
    heads = ctx.model.num_attention_heads
    if heads % c.tensor_parallel_size:
        return f"tensor_parallel_size={c.tensor_parallel_size} does not divide {heads} heads"
    return None


def _budget_below_seqs(c: Any, ctx: Context) -> str | None:
    # vLLM SchedulerConfig refuses max_num_batched_tokens < max_num_seqs (one token per sequence).
    if c.max_num_batched_tokens < c.max_num_seqs:
        return f"max_num_batched_tokens={c.max_num_batched_tokens} < max_num_seqs={c.max_num_seqs}"
    return None


def _unchunked_prompt_too_long(c: Any, ctx: Context) -> str | None:
    # Without chunked prefill a prompt must fit in one step's token budget.
    longest = int(ctx.workload.input_tokens * (1 + ctx.workload.length_spread))
    if not c.enable_chunked_prefill and c.max_num_batched_tokens < longest:
        return (
            f"chunked prefill off and max_num_batched_tokens={c.max_num_batched_tokens} "
            f"< longest prompt {longest}"
        )
    return None


RULES: tuple[Rule, ...] = (
    Rule(("*",), lambda c, ctx: config_reason(c)),
    Rule(("quantization",), _fp8_weights),
    Rule(("kv_dtype",), _fp8_kv),
    Rule(("quantization",), _int8_math),
    Rule(("tensor_parallel_size",), _tp_beyond_gpus),
    Rule(("tensor_parallel_size",), _tp_splits_heads),
    Rule(("max_num_batched_tokens", "max_num_seqs"), _budget_below_seqs),
    Rule(("enable_chunked_prefill", "max_num_batched_tokens"), _unchunked_prompt_too_long),
)


def invalid_reason(config: Any, ctx: Context) -> str | None:
    """Why `config` cannot run under `ctx` (first failing rule), or None when it is valid."""
    for rule in RULES:
        reason = rule.check(config, ctx)
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
