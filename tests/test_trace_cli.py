"""`tune` and `plan` with `--trace` (the shipped sample) and `--sessions`: they run and say so."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tuner.cli import app

SAMPLE = Path(__file__).resolve().parents[1] / "benchmarks/data/traces/sessions_sample.jsonl"
runner = CliRunner()


def test_tune_replays_the_shipped_trace(tmp_path: Path) -> None:
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]
    run = tmp_path / "run"
    result = runner.invoke(
        app, [*args, "--trace", str(SAMPLE), "--trials", "3", "--run-dir", str(run)]
    )
    assert result.exit_code == 0, result.output
    assert "trace capacity:" in result.stdout and "x the recorded speed" in result.stdout
    assert "prefix cache: hit rate" in result.stdout or "prefix cache: off" in result.stdout
    assert "trace_file:" in (run / "run.yaml").read_text(encoding="utf-8")


def test_plan_sizes_a_session_workload_at_its_recorded_speed(tmp_path: Path) -> None:
    args = ["plan", "--model", "llama-3.1-8b", "--gpus", "h200-sxm", "--sessions", "chat"]
    result = runner.invoke(app, [*args, "--run-dir", str(tmp_path / "plan")])
    assert result.exit_code == 0, result.output
    assert "SLA chat, 1.53" in result.stdout  # the chat preset's recorded mean rate, req/s


def test_a_bad_trace_stops_tune_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_bytes(b"\xff\xfe\n")
    args = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trace", str(bad)]
    result = runner.invoke(app, [*args, "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert [ln for ln in result.stderr.splitlines() if ln.strip()] == [
        f"error: {bad}:1: not UTF-8 text (byte 0); expected Mooncake JSONL (timestamp ms, "
        "input_length, output_length, hash_ids) or CSV/JSONL with timestamp (ms) or "
        "timestamp_s, input, output and optional session, turn"
    ]
