"""The answer is computed once: in a default-sized tune through the CLI (search, run folder,
terminal summary), each engine's export is built once and the picks are computed once."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tuner.answer import analysed
from tuner.cli import app
from tuner.export import dispatch
from tuner.export.bundle import EngineExport, ExportTarget
from tuner.export.registry import Exporter
from tuner.specs import EngineConfig


def test_a_tune_builds_each_engines_export_once_and_picks_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: Counter[str] = Counter()
    picked: list[int] = []

    def counting(exporter: Exporter) -> Exporter:
        def export(config: EngineConfig, target: ExportTarget) -> EngineExport:
            out = exporter.export(config, target)  # a refusal raises: not a built export
            built[exporter.name] += 1
            return out

        return dataclasses.replace(exporter, export=export)

    real_exporters, real_picks = dispatch.exporters, analysed.engine_picks
    monkeypatch.setattr(dispatch, "exporters", lambda: tuple(map(counting, real_exporters())))

    def picks(*args: Any, **kwargs: Any) -> Any:
        picked.append(1)
        return real_picks(*args, **kwargs)

    monkeypatch.setattr(analysed, "engine_picks", picks)
    run = tmp_path / "run"
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]
    result = CliRunner().invoke(app, [*args, "--trials", "30", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    assert len(picked) == 1
    written = {p.name for p in (run / "exports").iterdir()}
    assert {"vllm.sh", "sglang.sh", "trtllm.sh"} <= written  # all three engines were given one
    assert built == {"vllm": 1, "sglang": 1, "trtllm": 1}
    assert "vllm.sh" in result.output and "SGLang" in result.output
