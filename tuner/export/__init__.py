"""Exporters: EngineConfig -> each serving engine's real flags and config files.

Each engine module maps our knobs to that engine's option names in ONE table keyed by engine
version and never emits an option that is not in that table; it declares its `Exporter` record
(`tuner.export.registry`), and `EXPORTERS` lists the modules.
"""

from __future__ import annotations

from tuner.export.registry import EXPORTERS, Exporter, exporters, get_exporter

__all__ = ["ENGINES", "EXPORTERS", "Exporter", "exporters", "get_exporter"]

# Every registered engine's name, in registry order (the default of `export_config`).
ENGINES: tuple[str, ...] = tuple(EXPORTERS)
