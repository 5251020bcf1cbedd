"""Tiny models for engine tests: a few layers, hidden 64, weights scaled so logits are peaked."""

from __future__ import annotations

import torch

from tuner.engine.model import Transformer
from tuner.engine.weights import build_model
from tuner.specs import ModelSpec

VOCAB = 97
# Random init (std 0.02) gives near-uniform logits on a 64-wide model; these factors bring
# weights to ~1/sqrt(hidden) and logits to a std of a few units, so argmax/KL tests mean something.
_WEIGHT_GAIN = 5.0
_HEAD_GAIN = 25.0


def tiny_spec(**overrides: object) -> ModelSpec:
    """A 2-layer GQA llama spec (hidden 64, 4 heads, 2 KV heads, head_dim 16)."""
    fields: dict[str, object] = {
        "name": "tiny",
        "hidden_size": 64,
        "num_layers": 2,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 128,
        "vocab_size": VOCAB,
        "max_context": 512,
    }
    fields.update(overrides)
    return ModelSpec.model_validate(fields)


def tiny_model(
    spec: ModelSpec | None = None,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    fuse: bool = True,
) -> Transformer:
    """A seeded tiny model with peaked logits (fuse=False keeps HF parameter names)."""
    model = build_model(spec or tiny_spec(), dtype=torch.float32, seed=seed, fuse=fuse)
    for name, p in model.named_parameters():
        if name == "lm_head.weight" and not model.spec.tie_word_embeddings:
            p.data *= _HEAD_GAIN
        elif not name.endswith("norm.weight"):
            p.data *= _WEIGHT_GAIN
    return model.to(dtype)


def prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Random token-id prompts of the given lengths."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]
