"""Export dispatch: one variant to every engine's launch files, and a README saying what each is.

The engine modules turn a config into one engine's flags; this module asks each of them, keeps
an engine's refusal as its reason, and writes the files an exports/ folder holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from tuner.errors import InputError
from tuner.export import ENGINES, sglang, trtllm, vllm
from tuner.export.bundle import EngineExport
from tuner.export.tables import unspelled_reason
from tuner.run_spec import RunSpec
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig, Metrics
from tuner.validity import served_model_len

__all__ = ["export_config", "expressible", "write_engine_exports", "write_exports"]


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


def _config_yaml(config: EngineConfig) -> str:
    return yaml.safe_dump({"config": config.model_dump(mode="json")}, sort_keys=False)


def _write_files(exp: EngineExport, folder: Path) -> list[str]:
    """Write one engine's files; the README lines of its command and caveats."""
    for name, text in exp.files.items():
        (folder / name).write_text(text)
    return [exp.command, "", *(f"NOTE: {n}" for n in exp.notes), ""]


def write_exports(
    config: EngineConfig, spec: RunSpec, folder: Path, metrics: Metrics | None = None
) -> dict[str, EngineExport | str]:
    """Write every engine's files plus a README with commands and caveats into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    exports = export_config(config, spec, metrics)
    readme = ["# Launch recipes for this variant", "", _config_yaml(config)]
    for engine, exp in exports.items():
        if isinstance(exp, str):
            readme += [f"## {engine}: not expressible", "", exp, ""]
            continue
        readme += [f"## {engine} {exp.version}", "", *_write_files(exp, folder)]
    (folder / "README.md").write_text("\n".join(readme))
    return exports


def write_engine_exports(
    picks: Mapping[str, TrialRecord | str],
    spec: RunSpec,
    folder: Path,
    which: Mapping[str, str],
) -> None:
    """Each engine's files from the variant picked for it; the README says `which[engine]` it is.

    A pick given as a string is the reason that engine gets no files.
    """
    folder.mkdir(parents=True, exist_ok=True)
    readme = ["# Launch recipes: each engine gets the best front variant it can express", ""]
    for engine, pick in picks.items():
        if isinstance(pick, str):
            readme += [f"## {engine}: nothing to export", "", pick, ""]
            continue
        if pick.config is None:
            raise ValueError(f"trial {pick.number} has no engine config to export")
        exp = export_config(pick.config, spec, pick.metrics, engines=(engine,))[engine]
        if isinstance(exp, str):
            raise ValueError(f"{engine} was picked trial {pick.number} but refuses it: {exp}")
        readme += [f"## {engine} {exp.version}: {which[engine]}", "", _config_yaml(pick.config)]
        readme += _write_files(exp, folder)
    (folder / "README.md").write_text("\n".join(readme))
