"""`tuner tune` in capacity mode (the default) and fixed-load mode, end to end with the sim."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.run.best_file import TunedBest, load_best

BASE = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]


def test_default_tune_reports_capacity_distinct_front_and_three_engine_exports(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [*BASE, "--trials", "30", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "mode: capacity" in out and "capacity at the SLA:" in out
    assert "req/s, " in out and "output tok/s per GPU" in out and "req/s per replica: TTFT" in out
    best = load_best(run / "best.yaml")
    assert isinstance(best, TunedBest) and best.mode == "capacity" and best.schema_version == 1
    rec = best.recommended
    assert rec is not None and rec.capacity and rec.operating_point and rec.batch_limits
    assert rec.capacity.requests_per_s_per_gpu > 0 and rec.capacity.load > 0
    assert rec.operating_point.load <= rec.capacity.load
    assert rec.capacity.ttft_ms <= 500 and rec.capacity.tpot_ms <= 50
    assert rec.batch_limits.max_num_seqs == rec.config.max_num_seqs
    # The keys users read stay named after the SLA percentile.
    raw = yaml.safe_load((run / "best.yaml").read_text())["recommended"]
    assert raw["capacity"]["ttft_p95_ms"] == rec.capacity.ttft_ms and "tpot_p95_ms" in raw
    with (run / "pareto.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    outcomes = [
        (r["output_tokens_per_s_per_gpu"], r["tpot_p95_ms"], r["ttft_p95_ms"]) for r in rows
    ]
    assert len(set(outcomes)) == len(outcomes)
    assert all(int(r["stands_for"]) >= 1 for r in rows)
    # Every frontier row and trial carries its prediction's error band (tuner.perf.bands).
    assert all(float(r["tpot_band_pct"]) > 0 and r["band_source"] for r in rows)
    with (run / "trials.csv").open() as fh:
        done = [r for r in csv.DictReader(fh) if r["capacity_load"] not in ("", "0.0")]
    assert done and all(float(r["ttft_band_pct"]) > 0 for r in done)
    assert "keeps the SLA with the +" in out and "+- " in out
    assert (rec.operating_point.tpot_band_pct or 0) > 0
    for name in ("vllm.sh", "sglang.sh", "trtllm.sh"):
        assert (run / "exports" / name).is_file(), name
    assert best.exports is not None and set(best.exports) == {"vllm", "sglang", "trtllm"}


def test_explicit_concurrency_runs_fixed_load_mode(tmp_path: Path) -> None:
    run = tmp_path / "fixed"
    result = CliRunner().invoke(
        app, [*BASE, "--trials", "12", "--concurrency", "32", "--run-dir", str(run)]
    )
    assert result.exit_code == 0, result.output
    assert "mode: fixed load (32 closed-loop users)" in result.output
    best = load_best(run / "best.yaml")
    assert best.mode == "fixed" and best.recommended is not None
    assert isinstance(best, TunedBest) and best.recommended.capacity is None


def test_unknown_capacity_load_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*BASE, "--capacity-load", "qps", "--run-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--capacity-load 'qps' is not one of: rate, users" in result.output


def test_capacity_report_data_matches_the_frontier(tmp_path: Path) -> None:
    from tuner.report.capacity import MAX_CURVES, capacity_report
    from tuner.run.tune import open_study
    from tuner.run_spec import load_run_spec
    from tuner.search import study as search
    from tuner.search.pareto import analyze

    run = tmp_path / "run"
    result = CliRunner().invoke(app, [*BASE, "--trials", "20", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    spec = load_run_spec(run)
    records = search.records(open_study(spec, run, create=False))
    res = analyze(records, spec.sla)
    assert res.mode == "capacity"
    data = capacity_report(records, res, spec.sla)
    assert len(data.front_tok_s) == len(res.frontier) == len(data.front_user_tok_s)
    assert data.recommended is not None and 0 < len(data.curves) <= MAX_CURVES
    for curve in data.curves:
        assert curve.load == sorted(curve.load)
    # The frontier trades per-user speed for throughput: sorted by tok/s, speed never rises.
    speeds = [s for _, s in sorted(zip(data.front_tok_s, data.front_user_tok_s, strict=True))]
    assert all(a >= b for a, b in zip(speeds, speeds[1:], strict=False))
