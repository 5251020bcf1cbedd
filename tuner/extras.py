"""The optional pieces of tuner and what installs each, so a missing one is one clear line."""

from __future__ import annotations

__all__ = ["EXTRAS", "missing_extra"]

# Top-level module -> (the extra of pyproject.toml that installs it, what needs it).
EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("engine", "the torch backend, calibrate and acceptance"),
    "triton": ("engine", "the torch backend's GPU kernels"),
    "safetensors": ("engine", "the torch backend's weight loading"),
    "gguf": ("real", "real SmolLM2 weights"),
    "transformers": ("real", "real model weights and tokenizers"),
    "psycopg": ("scale", "a study on PostgreSQL, --storage postgresql://..."),
}


def missing_extra(exc: ImportError) -> str | None:
    """The one line naming the extra to install for a missing optional module, else None."""
    name = (exc.name or "").split(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or name not in EXTRAS:
        return None
    extra, needed_by = EXTRAS[name]
    install = f"pip install 'tuner[{extra}]'"
    return f"{name} is not installed ({needed_by}); install the {extra} extra: {install}"
