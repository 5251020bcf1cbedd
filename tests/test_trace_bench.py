"""`tuner bench --trace`: the trace's requests, lengths and shared blocks reach the server, and
`predict --trace` on the same trace counts the same requests."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from _fake_openai import FakeServerConfig, running_fake_server
from typer.testing import CliRunner

from tuner.cli import app

runner = CliRunner()


def _trace(tmp_path: Path) -> Path:
    rows = [
        {
            "timestamp": 50 * i,
            "input_length": 600 + 37 * i,
            "output_length": 3 + i % 4,
            "hash_ids": [7, 100 + i] if i % 2 else [8, 200 + i],
        }
        for i in range(12)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_bench_and_predict_replay_the_same_requests_and_lengths(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    with running_fake_server(FakeServerConfig(ttft_s=0.0, itl_s=0.0)) as server:
        bench = runner.invoke(app, ["bench", "--url", server.url, "--trace", str(path), "--json"])
    assert bench.exit_code == 0, bench.output
    predict = runner.invoke(
        app,
        ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trace", str(path),
         "--rate", "20", "--json"],
    )  # fmt: skip
    assert predict.exit_code == 0, predict.output
    measured, simulated = json.loads(bench.stdout), json.loads(predict.stdout)
    for key in ("num_requests", "warmup_requests"):
        assert measured[key] == simulated[key]
    assert measured["num_requests"] + measured["warmup_requests"] == 12
    # Every trace request reached the server with its lengths (the first body is the probe).
    sent = Counter((len(b["prompt"]), b["max_tokens"]) for b in server.bodies[1:])
    assert sent == Counter((600 + 37 * i, 3 + i % 4) for i in range(12))
    # Equal hash ids, equal tokens: the first 512-token block is shared by parity, not across.
    by_len = {len(b["prompt"]): b["prompt"] for b in server.bodies[1:]}
    odd = [by_len[600 + 37 * i] for i in (1, 3, 5)]
    even = [by_len[600 + 37 * i] for i in (0, 2)]
    assert odd[0][:512] == odd[1][:512] == odd[2][:512] != even[0][:512] == even[1][:512]
    assert odd[0][512:600] != odd[1][512:600]


def test_bench_shows_the_trace_it_replayed(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    with running_fake_server(FakeServerConfig(ttft_s=0.0, itl_s=0.0)) as server:
        result = runner.invoke(app, ["bench", "--url", server.url, "--trace", str(path)])
    assert result.exit_code == 0, result.output
    assert f"trace {path}: 12 requests over 1 s (20.00 req/s), replayed 1.00x faster" in (
        result.stdout
    )


def test_bench_sessions_sends_what_predict_sessions_simulates(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "preset: chat\nsessions: 3\nturns: 3\nsession_rate_per_s: 20\nthink_time_s: 0.05\n"
        "system_prompt_tokens: 256\nuser_tokens: 32\noutput_tokens: 4\nblock_tokens: 128\n"
        "seed: 3\n"
    )
    with running_fake_server(FakeServerConfig(ttft_s=0.0, itl_s=0.0)) as server:
        bench = runner.invoke(
            app, ["bench", "--url", server.url, "--sessions", str(spec), "--json"]
        )
    assert bench.exit_code == 0, bench.output
    predict = runner.invoke(
        app,
        ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sessions", str(spec),
         "--json"],
    )  # fmt: skip
    assert predict.exit_code == 0, predict.output
    measured, simulated = json.loads(bench.stdout), json.loads(predict.stdout)
    assert measured["num_requests"] == simulated["num_requests"] > 0
    # Every turn resends the history: later prompts share their leading block with earlier ones.
    prompts = [b["prompt"] for b in server.bodies[1:]]
    assert len(prompts) == measured["num_requests"] + measured["warmup_requests"]
    shared = [p for p in prompts if any(q != p and p[:128] == q[:128] for q in prompts)]
    assert len(shared) >= 2
