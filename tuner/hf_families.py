"""Each Hugging Face model family's reader: its config.json keys -> ModelSpec fields.

Dense decoder-only configs share one reader; each mixture-of-experts family names its experts
differently, so each has its own, listed in READERS with the structural keys it consumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.errors import InputError, echo

__all__ = ["READERS", "SUPPORTED_MOE", "Config", "read_dense"]

Config = dict[str, Any]
Reader = Callable[[Config, str], Config]

_LAYER_KINDS = ("full_attention", "sliding_attention", "chunked_attention")


def _int(cfg: Config, key: str, where: str, default: int | None = None) -> int | None:
    """cfg[key] as an int (None when absent), for keys the readers do arithmetic with."""
    value = cfg.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: field {echo(key)} must be an integer (got {echo(value)})")
    return value


def _positive(cfg: Config, key: str, where: str, default: int) -> int:
    """cfg[key] as an int >= 1 (a layer step or interval: zero would divide by zero)."""
    value = _int(cfg, key, where, default)
    if value is None or value < 1:
        raise InputError(f"{where}: field {echo(key)} must be an integer >= 1 (got {echo(value)})")
    return value


def _int_list(cfg: Config, key: str, where: str) -> list[int] | None:
    """cfg[key] as a list of ints (None when absent or null)."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise InputError(
            f"{where}: field {echo(key)} must be a list of integers (got {echo(value)})"
        )
    return value


def _required(cfg: Config, key: str, where: str, model_type: str) -> Any:
    """cfg[key], or one InputError naming the key this family keeps the number in."""
    if cfg.get(key) is None:
        raise InputError(
            f"{where}: field {echo(key)} is missing; model_type {echo(model_type)} states it there"
        )
    return cfg[key]


def _windowed(window: Any, count: int | None, layers: int | None) -> Config:
    """sliding_window fields for `count` windowed layers (None = every layer)."""
    if count == 0 or window is None:
        return {"sliding_window": None, "sliding_window_layers": None}
    if count is None or count == layers:
        return {"sliding_window": window, "sliding_window_layers": None}
    return {"sliding_window": window, "sliding_window_layers": count}


def _count_kind(types: Any, kind: str, layers: int | None, where: str) -> int:
    """How many `layer_types` entries are `kind`; refuses kinds that are not attention."""
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise InputError(f"{where}: field 'layer_types' must be a list of strings")
    unknown = sorted(set(types) - set(_LAYER_KINDS))
    if unknown:
        raise InputError(
            f"{where}: field 'layer_types' has {echo(unknown[0])} layers, which a ModelSpec cannot "
            f"describe; supported layer types: {', '.join(_LAYER_KINDS)}"
        )
    if layers is not None and len(types) != layers:
        raise InputError(
            f"{where}: field 'layer_types' lists {len(types)} layers but num_hidden_layers={layers}"
        )
    return sum(1 for t in types if t == kind)


def _sliding(cfg: Config, where: str, default_count: int | None = None) -> Config:
    """Window and windowed-layer count from sliding_window, layer_types and Qwen's switches."""
    layers = _int(cfg, "num_hidden_layers", where)
    window = cfg.get("sliding_window")
    if not cfg.get("use_sliding_window", True):
        window = None
    if cfg.get("layer_types") is not None:
        count = _count_kind(cfg["layer_types"], "sliding_attention", layers, where)
        return _windowed(window, count, layers)
    if default_count is not None:
        return _windowed(window, default_count, layers)
    # Qwen2/Qwen3: with use_sliding_window on, layers from max_window_layers on slide.
    full = _int(cfg, "max_window_layers", where) if cfg.get("use_sliding_window") else None
    if full is not None and layers is not None:
        return _windowed(window, max(0, layers - full), layers)
    return _windowed(window, None, layers)


def read_dense(cfg: Config, where: str) -> Config:
    """Every decoder-only family with one gated MLP per layer."""
    return _sliding(cfg, where)


def _mixtral(cfg: Config, where: str) -> Config:
    """Mixtral: num_local_experts experts of intermediate_size each, in every layer."""
    return {
        "num_experts": _required(cfg, "num_local_experts", where, "mixtral"),
        "num_experts_per_tok": _required(cfg, "num_experts_per_tok", where, "mixtral"),
        **_sliding(cfg, where),
    }


def _qwen3_moe(cfg: Config, where: str) -> Config:
    """Qwen3-MoE: num_experts of moe_intermediate_size; mlp_only_layers stay dense."""
    dense = sorted(set(_int_list(cfg, "mlp_only_layers", where) or []))
    if dense != list(range(len(dense))):
        raise InputError(
            f"{where}: field 'mlp_only_layers' is {echo(dense)}; only a leading run 0..k-1 of "
            "dense layers can be described (first_k_dense)"
        )
    return {
        "num_experts": _required(cfg, "num_experts", where, "qwen3_moe"),
        "num_experts_per_tok": _required(cfg, "num_experts_per_tok", where, "qwen3_moe"),
        "moe_intermediate_size": _required(cfg, "moe_intermediate_size", where, "qwen3_moe"),
        "moe_layer_step": _positive(cfg, "decoder_sparse_step", where, 1),
        "first_k_dense": len(dense),
        **_sliding(cfg, where),
    }


def _deepseek(cfg: Config, where: str) -> Config:
    """DeepSeek-V2/V3: MLA, routed plus shared experts, first_k_dense_replace dense layers."""
    mt = str(cfg.get("model_type"))
    if _positive(cfg, "moe_layer_freq", where, 1) != 1:
        raise InputError(
            f"{where}: field 'moe_layer_freq' is {cfg['moe_layer_freq']}; only 1 (every layer "
            "after first_k_dense_replace is MoE) can be described"
        )
    experts = cfg.get("n_routed_experts") or 0
    moe: Config = {}
    if experts:
        moe = {
            "num_experts": experts,
            "num_experts_per_tok": _required(cfg, "num_experts_per_tok", where, mt),
            "num_shared_experts": cfg.get("n_shared_experts") or 0,
            "moe_intermediate_size": _required(cfg, "moe_intermediate_size", where, mt),
            "first_k_dense": cfg.get("first_k_dense_replace") or 0,
        }
    return {
        **moe,
        # transformers writes the RoPE width into head_dim; MLA's q/k width is nope + rope.
        "head_dim": None,
        "kv_lora_rank": _required(cfg, "kv_lora_rank", where, mt),
        "q_lora_rank": cfg.get("q_lora_rank"),
        "qk_rope_head_dim": _required(cfg, "qk_rope_head_dim", where, mt),
        "qk_nope_head_dim": _required(cfg, "qk_nope_head_dim", where, mt),
        "v_head_dim": _required(cfg, "v_head_dim", where, mt),
        "num_mtp_layers": cfg.get("num_nextn_predict_layers") or 0,
        **_sliding(cfg, where),
    }


def _gpt_oss(cfg: Config, where: str) -> Config:
    """gpt-oss: biased experts and router, attention sinks, alternating 128-token windows."""
    top_k, alias = cfg.get("num_experts_per_tok"), cfg.get("experts_per_token")
    if top_k is not None and alias is not None and top_k != alias:
        raise InputError(
            f"{where}: field 'experts_per_token' is {echo(alias)} but num_experts_per_tok is "
            f"{echo(top_k)}; gpt-oss states its routed experts per token in both"
        )
    layers = _int(cfg, "num_hidden_layers", where)
    # GptOssConfig's default when layer_types is absent: even layers slide, odd ones are full.
    default = None if layers is None else (layers + 1) // 2
    return {
        "num_experts": _required(cfg, "num_local_experts", where, "gpt_oss"),
        "num_experts_per_tok": top_k if top_k is not None else alias,
        "expert_bias": True,
        "attention_sinks": True,
        **_sliding(cfg, where, default),
    }


def _llama4(cfg: Config, where: str) -> Config:
    """Llama-4: routed plus one shared expert, interleaved dense layers, chunked attention."""
    mt = str(cfg.get("model_type"))
    layers = _int(cfg, "num_hidden_layers", where)
    step = _positive(cfg, "interleave_moe_layer_step", where, 1)
    moe_layers = _int_list(cfg, "moe_layers", where)
    if (
        moe_layers is not None
        and layers is not None
        and (
            len(set(moe_layers)) != layers // step
            or any((i + 1) % step or not 0 <= i < layers for i in moe_layers)
        )
    ):
        raise InputError(
            f"{where}: field 'moe_layers' is not every {step}-th layer "
            f"(interleave_moe_layer_step={step}); only that pattern can be described"
        )
    return {
        "num_experts": _required(cfg, "num_local_experts", where, mt),
        "num_experts_per_tok": _required(cfg, "num_experts_per_tok", where, mt),
        "num_shared_experts": 1,  # Llama4TextMoe always adds one expert-width shared MLP
        "intermediate_size": _required(cfg, "intermediate_size_mlp", where, mt),
        "moe_intermediate_size": _required(cfg, "intermediate_size", where, mt),
        "moe_layer_step": step,
        **_windowed(cfg.get("attention_chunk_size"), _chunked_layers(cfg, layers, where), layers),
    }


def _chunked_layers(cfg: Config, layers: int | None, where: str) -> int | None:
    """Llama-4 layers with chunked attention: the RoPE ones (no_rope_layers[i] == 1)."""
    if cfg.get("layer_types") is not None:
        return _count_kind(cfg["layer_types"], "chunked_attention", layers, where)
    rope = _int_list(cfg, "no_rope_layers", where)
    if rope:
        if layers is not None and len(rope) != layers:
            raise InputError(
                f"{where}: field 'no_rope_layers' lists {len(rope)} layers but "
                f"num_hidden_layers={layers}"
            )
        return sum(1 for r in rope if r)
    # Llama4TextConfig's default: every no_rope_layer_interval-th layer is NoPE and global.
    interval = _positive(cfg, "no_rope_layer_interval", where, 4)
    return None if layers is None else layers - layers // interval


# model_type -> (reader, the structural keys it consumes)
READERS: dict[str, tuple[Reader, frozenset[str]]] = {
    "mixtral": (_mixtral, frozenset({"num_local_experts", "num_experts_per_tok"})),
    "qwen3_moe": (
        _qwen3_moe,
        frozenset(
            {
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "decoder_sparse_step",
                "mlp_only_layers",
            }
        ),
    ),
    "gpt_oss": (
        _gpt_oss,
        frozenset(
            {
                "num_local_experts",
                "num_experts_per_tok",
                "experts_per_token",
            }
        ),
    ),
    "llama4": (
        _llama4,
        frozenset(
            {
                "num_local_experts",
                "num_experts_per_tok",
                "intermediate_size_mlp",
                "moe_layers",
                "interleave_moe_layer_step",
                "attention_chunk_size",
            }
        ),
    ),
}
READERS["llama4_text"] = READERS["llama4"]
READERS["deepseek_v2"] = READERS["deepseek_v3"] = (
    _deepseek,
    frozenset(
        {
            "n_routed_experts",
            "n_shared_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "first_k_dense_replace",
            "moe_layer_freq",
            "kv_lora_rank",
            "q_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
        }
    ),
)
SUPPORTED_MOE = ("mixtral", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4")
