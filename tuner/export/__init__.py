"""Exporters: EngineConfig -> each serving engine's real flags and config files.

Each engine module maps our knobs to that engine's option names in ONE table keyed by engine
version and never emits an option that is not in that table.
"""

from __future__ import annotations

__all__ = ["ENGINES"]

# engine name -> module under tuner.export exposing `export(config, model, ...) -> EngineExport`
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
