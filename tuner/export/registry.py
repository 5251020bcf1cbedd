"""The exporter registry: engine name -> the module that declares its `Exporter` record.

Modelled on `tuner.backends.BACKENDS`: each exporter module declares `EXPORTER`, one record
with its names, its launch script, the engine versions its options table knows and its one
`export(config, target)` function; this table says where each record lives. Dispatch, the
tables' unspelled-knob check and the golden tests loop over it, and what people read (the
display name, the script) comes from the records, so a new exporter is one module plus one line
here (and its golden files).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from tuner.errors import InputError, echo
from tuner.export.bundle import EngineExport, ExportTarget
from tuner.perf.engines import ENGINE_MODELS
from tuner.specs import Engine, EngineConfig, Metrics

__all__ = [
    "EXPORTERS",
    "ExportFn",
    "Exporter",
    "engine_label",
    "engine_words",
    "exporters",
    "get_exporter",
    "other_engine_reason",
]

ExportFn = Callable[[EngineConfig, ExportTarget], EngineExport]


@dataclass(frozen=True)
class Exporter:
    """One engine's exporter as the rest of tuner sees it."""

    name: str  # the engine's key: EngineExport.engine, exports/README.md sections, CSV columns
    display_name: str  # how a person reads it: "vLLM"
    script: str  # the launch script among its files: "vllm.sh"
    versions: tuple[str, ...]  # the engine versions its options table is keyed by
    export: ExportFn  # config + target -> launch files at the latest version; InputError if not
    tables: tuple[str, ...]  # its row tables in tuner.export.tables.ROWS
    # The `engine` knob value whose variants it launches; "" = its name. The engine knob is an
    # exporter's identity: a variant's numbers describe one engine, so only that engine's
    # launchers may carry it (a second launcher of one engine names it here).
    engine: str = ""

    @property
    def runs(self) -> str:
        """The engine knob value this exporter's files launch."""
        return self.engine or self.name


# engine name -> module declaring `EXPORTER`, in the order exports are listed and written;
# imported on first use (as BACKENDS), so an exporter module may import this one.
EXPORTERS: dict[str, str] = {
    "vllm": "tuner.export.vllm",
    "sglang": "tuner.export.sglang",
    "trtllm": "tuner.export.trtllm",
}


def get_exporter(name: str) -> Exporter:
    """The registered exporter called `name` (its module is imported on first use)."""
    if name not in EXPORTERS:
        raise InputError(f"unknown engine {echo(name)}; allowed: {', '.join(EXPORTERS)}")
    exporter = importlib.import_module(EXPORTERS[name]).EXPORTER
    if not isinstance(exporter, Exporter) or exporter.name != name:
        raise TypeError(f"{EXPORTERS[name]}.EXPORTER is not the Exporter record of {name!r}")
    return exporter


def exporters() -> tuple[Exporter, ...]:
    """Every registered exporter, in registry order."""
    return tuple(get_exporter(name) for name in EXPORTERS)


def engine_words(engine: Engine | str) -> str:
    """How a person reads an engine knob value: "SGLang" (its behaviour record's name)."""
    name = engine.value if isinstance(engine, Engine) else engine
    record = ENGINE_MODELS.get(name)
    return record.display_name if record else name


def engine_label(config: EngineConfig, metrics: Metrics | None = None) -> str:
    """The engine a variant's numbers describe, with the release whose source the simulator's
    behaviour record was read from when the metrics say it: "SGLang (modelled on 0.5.9)"; the
    launch files may target another release (their section names it)."""
    extra = metrics.extra if metrics is not None else {}
    version = extra.get("engine_version")
    words = engine_words(config.engine)
    return f"{words} (modelled on {version})" if version else words


def other_engine_reason(exporter: Exporter, config: EngineConfig) -> str | None:
    """Why `exporter` may not launch `config`: the variant runs on another engine (None if not)."""
    engine = config.engine.value
    if engine == exporter.runs:
        return None
    return f"this variant runs on {engine_words(engine)} (engine={engine})"
