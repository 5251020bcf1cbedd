"""Export dispatch: one variant to every engine's launch files (pure: config in, files out).

The engine modules turn a config into one engine's flags; this module asks each of them and keeps
an engine's refusal as its reason. Writing an exports/ folder is the run's job (tuner.run.exports).
"""

from __future__ import annotations

from tuner.errors import InputError
from tuner.export import ENGINES, sglang, trtllm, vllm
from tuner.export.bundle import EngineExport
from tuner.export.tables import unspelled_reason
from tuner.run_spec import RunSpec
from tuner.specs import EngineConfig, Metrics
from tuner.validity import served_model_len

__all__ = ["export_config", "expressible"]


def export_config(
    config: EngineConfig,
    spec: RunSpec,
    metrics: Metrics | None = None,
    engines: tuple[str, ...] = ENGINES,
) -> dict[str, EngineExport | str]:
    """Each engine's export for `config`, or the reason that engine cannot express it."""
    out: dict[str, EngineExport | str] = {}
    model = spec.model_source
    # The served --max-model-len, so that a chunked-prefill-off variant is checked against the
    # workload's longest request exactly as predict and the backends check it.
    model_len = served_model_len(spec.context())
    makers = {
        "vllm": lambda: vllm.export(config, model, gpu=spec.gpu, max_model_len=model_len),
        "sglang": lambda: sglang.export(config, model, gpu=spec.gpu),
        "trtllm": lambda: trtllm.export(config, model, metrics=metrics, gpu=spec.gpu),
    }
    for engine, make in makers.items():
        if engine not in engines:
            continue
        if reason := unspelled_reason(engine, config):
            out[engine] = reason
            continue
        try:
            out[engine] = make()
        except InputError as exc:
            out[engine] = str(exc)
    return out


def expressible(engine: str, config: EngineConfig, spec: RunSpec) -> str | None:
    """None when `engine`'s exporter can express `config`, else the exporter's reason."""
    result = export_config(config, spec, engines=(engine,))[engine]
    return result if isinstance(result, str) else None
