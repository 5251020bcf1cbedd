"""Build a Transformer: seeded random weights, or a local Hugging Face safetensors directory."""

from __future__ import annotations

from pathlib import Path

import torch

from tuner.engine.model import Transformer
from tuner.errors import InputError
from tuner.specs import ModelSpec

__all__ = ["INIT_STD", "build_model", "load_safetensors_dir"]

# Std of random weights, as HF's `initializer_range` default for Llama (0.02).
INIT_STD = 0.02


def build_model(
    spec: ModelSpec,
    *,
    model_path: str | Path | None = None,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cpu",
    seed: int = 0,
    fuse: bool = True,
) -> Transformer:
    """A model of `spec` in eval mode: weights from model_path if given, else seeded random.

    fuse=True concatenates q/k/v and gate/up after loading (fewer, larger matmuls).
    """
    with torch.device("meta"):
        model = Transformer(spec)
    model = model.to_empty(device="cpu")
    if spec.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    if model_path is not None:
        load_safetensors_dir(model, Path(model_path))
    else:
        _random_init(model, seed)
    if fuse:
        model.fuse_projections()
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _random_init(model: Transformer, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.data.fill_(1.0)
        elif name.endswith(".bias"):
            param.data.zero_()
        else:
            param.data.normal_(0.0, INIT_STD, generator=gen)


def load_safetensors_dir(model: Transformer, path: Path) -> None:
    """Copy every `*.safetensors` tensor in `path` into the model; names must match exactly."""
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise InputError(f"{path}: no *.safetensors files (expected a Hugging Face model folder)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    if model.spec.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    expected = dict(model.named_parameters())
    if model.spec.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise InputError(
            f"{path}: weights do not match the model card: missing {missing[:3]}"
            f"{'...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}"
        )
    for name, param in expected.items():
        if tuple(state[name].shape) != tuple(param.shape):
            raise InputError(
                f"{path}: {name} has shape {tuple(state[name].shape)}, the card says "
                f"{tuple(param.shape)}"
            )
        param.data.copy_(state[name])
