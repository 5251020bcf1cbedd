"""Read a Hugging Face config.json into a ModelSpec, family by family, refusing what it cannot map.

Dense decoder-only configs (llama, mistral, qwen2/3, gemma, phi3, ...) share one reading. Each
mixture-of-experts family names its experts differently, so each has its own reader: mixtral,
qwen3_moe, deepseek_v2/v3 (MLA), gpt_oss and llama4. A config that carries an expert, latent
attention or hybrid-layer field its family's reader does not consume is refused, naming the field:
read as dense, such a model would silently lose most of its parameters.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tuner.errors import InputError, echo
from tuner.hf_families import READERS, SUPPORTED_MOE, Config, read_dense
from tuner.model_spec import ModelSpec, check_model_id
from tuner.yaml_read import (
    MAX_NESTING,
    format_validation_error,
    is_dir,
    nesting_depth,
    path_exists,
    read_text,
)

__all__ = ["SUPPORTED_MOE", "load_hf_config", "spec_fields"]


# HF config classes whose tie_word_embeddings default is True, so config.json often omits the key
# (transformers GemmaConfig, Gemma2Config, Gemma3TextConfig); every other family defaults False.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text"})

# Keys that add experts, latent attention or non-attention layers. Each reader lists the ones it
# consumes; any other such key with a non-empty value means a layout this module does not know.
_STRUCTURAL = re.compile(
    r"expert|moe|n_routed|n_shared|lora_rank|qk_rope|qk_nope|v_head_dim|mamba|ssm|^linear_|"
    r"hybrid|block_type|attn_layer|attn_type|sparse_step|mlp_only|dense_replace|"
    r"intermediate_size_mlp|attention_chunk"
)
# Families whose layers are not all softmax attention (state-space, linear or recurrent mixers):
# refused by model_type even where their config spells no key the pattern above knows.
_HYBRID_TYPES = frozenset(
    {
        "bamba",
        "falcon_h1",
        "falcon_mamba",
        "granitemoehybrid",
        "jamba",
        "lfm2",
        "mamba",
        "mamba2",
        "minimax",
        "nemotron_h",
        "plamo2",
        "qwen3_next",
        "recurrent_gemma",
        "rwkv",
        "zamba",
        "zamba2",
    }
)
_SUPPORTED = f"supported: dense decoder-only families and {', '.join(SUPPORTED_MOE)}"


def _refuse_unread(cfg: Config, model_type: str, consumed: frozenset[str], where: str) -> None:
    """InputError naming the first structural key the family's reader would drop."""
    for key, value in cfg.items():
        if key in consumed or not value or not _STRUCTURAL.search(key):
            continue
        reads = f"reads {', '.join(sorted(consumed))}" if consumed else "is read as dense"
        raise InputError(
            f"{where}: field {echo(key)} is not understood for model_type {echo(model_type)} "
            f"(which {reads}); reading the model without it would be wrong; {_SUPPORTED}"
        )


def _language_config(cfg: Config, where: str) -> Config:
    """The language model's fields: multimodal configs nest them under text_config."""
    if "text_config" in cfg and "hidden_size" not in cfg:
        if not isinstance(cfg["text_config"], dict):
            raise InputError(f"{where}: field 'text_config' must be an object")
        return {**cfg, **cfg["text_config"]}
    return cfg


def _rope_theta(cfg: Config) -> Any:
    """rope_theta, or transformers 5's rope_parameters.rope_theta, or the 10000 default."""
    if "rope_theta" in cfg:
        return cfg["rope_theta"]
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return params["rope_theta"]
    return 10000.0


def spec_fields(cfg: Config, where: str, name: str) -> Config:
    """ModelSpec fields of one parsed config.json; InputError naming any field it cannot map."""
    text = _language_config(cfg, where)
    model_type = text.get("model_type", "llama")
    if not isinstance(model_type, str):
        raise InputError(f"{where}: field 'model_type' must be a string (got {echo(model_type)})")
    for mt in (model_type, cfg.get("model_type")):
        if isinstance(mt, str) and mt in _HYBRID_TYPES:
            raise InputError(
                f"{where}: field 'model_type' is {echo(mt)}, whose layers are not all attention "
                f"(state-space / linear mixers), which a ModelSpec cannot describe; {_SUPPORTED}"
            )
    reader, consumed = READERS.get(model_type, (read_dense, frozenset()))
    _refuse_unread(text, model_type, consumed, where)
    heads = text.get("num_attention_heads")
    bias = bool(text.get("attention_bias", model_type == "qwen2"))
    hf_id = cfg.get("_name_or_path") or None
    if isinstance(hf_id, str):  # the exports' model id: a stranger's file must not inject lines
        check_model_id(hf_id, f"{where}: field '_name_or_path'")
    return {
        "name": name,
        "hf_id": hf_id,
        "family": cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else model_type,
        "hidden_size": text.get("hidden_size"),
        "num_layers": text.get("num_hidden_layers"),
        "num_attention_heads": heads,
        "num_kv_heads": text.get("num_key_value_heads") or heads,
        "head_dim": text.get("head_dim"),
        "intermediate_size": text.get("intermediate_size"),
        "vocab_size": text.get("vocab_size"),
        "tie_word_embeddings": bool(
            text.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
        ),
        "attention_bias": bias,
        # Qwen2 hard-codes q/k/v biases without one on o_proj; the others bias all four.
        "attention_out_bias": bias and model_type != "qwen2",
        "max_context": text.get("max_position_embeddings"),
        "rope_theta": _rope_theta(text),
        "rms_norm_eps": text.get("rms_norm_eps", 1e-5),
        **reader(text, where),
    }


def _read_json(file: Path) -> Any:
    """The parsed JSON of `file`, or one InputError line saying why it cannot be read."""
    text = read_text(file, "Hugging Face config.json")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{file}: malformed JSON at line {exc.lineno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise InputError(f"{file}: nested deeper than {MAX_NESTING} levels") from exc
    if nesting_depth(cfg) > MAX_NESTING:
        raise InputError(f"{file}: nested deeper than {MAX_NESTING} levels")
    return cfg


def load_hf_config(path: Path) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face `config.json` (file or model directory)."""
    file = path / "config.json" if is_dir(path) else path
    if not path_exists(file):
        raise InputError(f"{file}: no such file (expected a Hugging Face config.json)")
    cfg = _read_json(file)
    if not isinstance(cfg, dict):
        raise InputError(f"{file}: expected a JSON object")
    name = file.parent.name if file.parent.name else file.stem
    data = spec_fields(cfg, str(file), name)
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, str(file), ModelSpec)) from exc
