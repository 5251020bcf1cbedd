"""Export dispatch: one variant to every engine's launch files (pure: config in, files out).

The registered exporters (tuner.export.registry) turn a config into one engine's flags; this module
asks each of them, in registry order, for one shared target and keeps an engine's refusal as its
reason. The `engine` knob is the exporter's identity: a variant of engine E (whose scheduling and
overheads its numbers describe) goes to E's exporter only, and every other one says so. Writing
an exports/ folder is the run's job (tuner.run.exports).
"""

from __future__ import annotations

from tuner.errors import InputError
from tuner.export import ENGINES, exporters, get_exporter
from tuner.export.bundle import EngineExport, ExportTarget
from tuner.export.measured_launch import MeasuredLaunch
from tuner.export.registry import other_engine_reason
from tuner.export.tables import unspelled_reason
from tuner.run_spec import RunSpec
from tuner.specs import Context, EngineConfig, Metrics
from tuner.validity import served_model_len

__all__ = ["engine_refusal", "export_config", "expressible", "export_target"]


def export_target(spec: RunSpec, metrics: Metrics | None = None) -> ExportTarget:
    """What a run's variants are exported for: its model source, GPU, served length and, from
    measured `metrics`, the launch the measurement ran."""
    # The served --max-model-len, so that a chunked-prefill-off variant is checked against the
    # workload's longest request exactly as predict and the backends check it.
    # Measured metrics carry how the backend launched the engine: that engine's export repeats it.
    return ExportTarget(
        model=spec.model_source,
        gpu=spec.gpu,
        max_model_len=served_model_len(spec.context()),
        metrics=metrics,
        launch=MeasuredLaunch.from_extra(metrics.extra) if metrics is not None else None,
    )


def export_config(
    config: EngineConfig,
    spec: RunSpec,
    metrics: Metrics | None = None,
    engines: tuple[str, ...] = ENGINES,
) -> dict[str, EngineExport | str]:
    """Each engine's export for `config`, or the reason that engine cannot express it: a knob
    it has no option for, or a variant of another engine (only `config.engine` launches it)."""
    target = export_target(spec, metrics)
    out: dict[str, EngineExport | str] = {}
    for exporter in exporters():
        if exporter.name not in engines:
            continue
        # The unspelled knob first: a knob an exporter lacks is named whatever the engine.
        reason = unspelled_reason(exporter.name, config) or other_engine_reason(exporter, config)
        if reason:
            out[exporter.name] = reason
            continue
        try:
            out[exporter.name] = exporter.export(config, target)
        except InputError as exc:
            out[exporter.name] = str(exc)
    return out


def expressible(engine: str, config: EngineConfig, spec: RunSpec) -> str | None:
    """None when `engine`'s exporter can express `config`, else the exporter's reason."""
    result = export_config(config, spec, engines=(engine,))[engine]
    return result if isinstance(result, str) else None


def engine_refusal(config: EngineConfig, ctx: Context) -> str | None:
    """Why the variant's own engine cannot launch it in `ctx` (its exporter's refusal: what each
    engine can run lives in its options table), or None when it can."""
    exporter = get_exporter(config.engine.value)
    if unspelled_reason(exporter.name, config):
        return None  # a knob with no row in its table yet: predicted, refused at export time
    target = ExportTarget(model=ctx.model.name, gpu=ctx.gpu, max_model_len=served_model_len(ctx))
    try:
        exporter.export(config, target)
    except InputError as exc:
        return str(exc)
    return None
