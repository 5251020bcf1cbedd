"""The report's data object (computed before any figure) is consistent with the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.report.data import report_data
from tuner.report.figures import figures
from tuner.run.tune import open_study
from tuner.run_spec import load_run_spec
from tuner.search import study as search
from tuner.search.pareto import analyze


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    result = CliRunner().invoke(
        app,
        [
            "tune",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200-sxm",
            "--trials",
            "30",
            "--run-dir",
            str(folder),
        ],
    )
    assert result.exit_code == 0, result.output
    return folder


def test_report_data_matches_records(run: Path) -> None:
    spec = load_run_spec(run)
    records = search.records(open_study(spec, run, create=False))
    result = analyze(records, spec.sla)
    data = report_data(spec, records, result)
    ran = [r for r in records if r.evaluated and r.metrics and r.metrics.feasible]
    assert len(data.points) == len(ran)
    assert {p.number for p in data.points if p.on_front} == set(result.front)
    assert [p.number for p in data.points if p.recommended] == [result.recommended]
    assert all(p.meets_sla for p in data.points if p.on_front)
    assert len(data.history_numbers) == len(data.best_so_far) == len(data.hv_history)
    best = [b for b in data.best_so_far if b is not None]
    assert best == sorted(best)  # best-so-far never decreases
    assert data.tpot_bound_ms == 50 and data.ttft_bound_ms == 500
    # The default space speculates with n-gram: on a chat SLA the report names the shipped
    # measured chat curve the acceptance comes from.
    assert data.inputs["speculative acceptance"] == (
        "ngram: acceptance of the shipped chat curve (measured by `tuner acceptance --draft "
        "ngram --kind chat`, smollm2-135m, k=4; per position 0.05, 0.43, 0.67, 0.50)"
    )
    figs = figures(data)
    assert {"pareto-tpot", "pareto-ttft", "parallel", "history"} <= set(figs)
    names = [t["name"] for t in figs["pareto-tpot"]["data"]]
    assert "all trials" in names and "recommended" in names
    assert all(n.startswith("Pareto: ") for n in names if n not in ("all trials", "recommended"))
