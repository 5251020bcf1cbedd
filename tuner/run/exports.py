"""An exports/ folder: each engine's launch files and a README saying which variant each is."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from tuner.answer.picks import EnginePick
from tuner.export.bundle import EngineExport
from tuner.export.dispatch import export_config
from tuner.export.registry import engine_label, get_exporter
from tuner.run_spec import RunSpec
from tuner.specs import EngineConfig, Metrics

__all__ = ["write_exports", "write_picked_exports"]


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
    # What launches it first (its own engine's exporters); the others say it runs elsewhere.
    own = [e for e, exp in exports.items() if not isinstance(exp, str)]
    exports = {e: exports[e] for e in [*own, *(e for e in exports if e not in own)]}
    readme = ["# Launch recipes for this variant", "", _config_yaml(config)]
    for engine, exp in exports.items():
        if isinstance(exp, str):
            readme += [f"## {engine}: not expressible", "", exp, ""]
            continue
        readme += [f"## {engine} {exp.version}", "", *_write_files(exp, folder)]
    (folder / "README.md").write_text("\n".join(readme))
    return exports


def _intro(picks: Mapping[str, EnginePick | str]) -> list[str]:
    """The README's head: which engine runs the recommendation and which script launches it."""
    head = ["# Launch recipes: each engine gets the best front variant of its own engine", ""]
    primary = [(e, p) for e, p in picks.items() if not isinstance(p, str) and p.primary]
    for engine, pick in primary[:1]:
        exporter, config = get_exporter(engine), pick.record.config
        assert config is not None
        head += [
            f"The recommendation runs on {engine_label(config, pick.record.metrics)}: "
            f"`{exporter.script}` launches it (first below); the other engines' sections are "
            "their own best variants, for comparison or where that engine is what you run.",
            "",
        ]
    return head


def write_picked_exports(picks: Mapping[str, EnginePick | str], folder: Path) -> None:
    """The analysed run's picks as an exports/ folder: each engine's files (built once, with the
    picks) and a README naming which variant each engine got, or why it got none; the
    recommended engine's section comes first and says it is the recommendation."""
    folder.mkdir(parents=True, exist_ok=True)
    readme = _intro(picks)
    for engine, pick in picks.items():
        if isinstance(pick, str):
            readme += [f"## {engine}: nothing to export", "", pick, ""]
            continue
        config, exp = pick.record.config, pick.export
        assert config is not None
        readme += [f"## {engine} {exp.version}: {pick.note}", "", _config_yaml(config)]
        readme += _write_files(exp, folder)
    (folder / "README.md").write_text("\n".join(readme))
