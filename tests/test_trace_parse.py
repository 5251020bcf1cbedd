"""`--trace FILE`: Mooncake and plain traces, streamed and bounded; bad ones: one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tuner.bench import trace_file
from tuner.bench.trace_file import MAX_TRACE_LINE_BYTES, MAX_TRACE_TOKENS, load_trace
from tuner.cli import app
from tuner.errors import InputError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "benchmarks" / "data" / "traces" / "sessions_sample.jsonl"
runner = CliRunner()


def _jsonl(tmp_path: Path, rows: list[dict[str, object]], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(t: float, isl: int = 1000, osl: int = 10, ids: list[int] | None = None) -> dict:
    return {"timestamp": t, "input_length": isl, "output_length": osl, "hash_ids": ids or [1, 2]}


def test_the_shipped_sample_is_a_mooncake_trace_with_repeating_blocks() -> None:
    trace = load_trace(SAMPLE)
    assert trace.count == 240
    assert trace.arrival_s[0] == 0 and np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.blocks is not None and trace.blocks.block_tokens == 512
    for i in range(trace.count):
        assert len(trace.blocks.of(i)) == -(-int(trace.input_tokens[i]) // 512)
    firsts = [trace.blocks.of(i)[0] for i in range(trace.count)]
    assert len(set(firsts)) == 1  # every prompt opens with the shared system prompt's block
    assert trace.native_rate_rps is not None and trace.native_rate_rps > 0


def test_the_shipped_sample_is_what_its_script_writes() -> None:
    script = ROOT / "scripts" / "make_trace_sample.py"
    done = subprocess.run([sys.executable, str(script), "--check"], cwd=ROOT, check=False)
    assert done.returncode == 0


def test_replay_scales_the_recorded_times_by_one_speedup(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [_row(1000), _row(2000), _row(5000)])
    trace = load_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 1.0, 4.0]
    assert trace.native_rate_rps == pytest.approx(0.5)
    assert trace.arrivals_at(1.0).tolist() == pytest.approx([0.0, 0.5, 2.0])
    assert trace.speedup(1.0) == pytest.approx(2.0)


def test_plain_csv_with_sessions_gets_history_blocks(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp_s,input,output,session,turn\n0,1100,600,a,0\n0.5,700,10,b,0\n9,2000,10,a,1\n",
        encoding="utf-8",
    )
    trace = load_trace(path)
    assert trace.count == 3 and trace.blocks is not None
    first, other, second = (trace.blocks.of(i) for i in range(3))
    # Turn 1 of session a resends turn 0 and its answer (1700 tokens: 3 full blocks of 512).
    assert second[:2] == first[:2]
    assert not set(other) & set(first)
    assert len(second) == 4


def test_plain_jsonl_without_content_has_no_blocks(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [{"timestamp": 0, "input": 10, "output": 5}])
    trace = load_trace(path)
    assert trace.blocks is None and trace.count == 1 and trace.duration_s == 0


BAD = {
    "empty": ("", "no requests"),
    "unsorted": (
        json.dumps(_row(2000)) + "\n" + json.dumps(_row(1000)) + "\n",
        ":2: timestamp: 1000 is earlier",
    ),
    "negative length": (json.dumps(_row(0, isl=-5)) + "\n", ":1: input_length: -5 is not"),
    "absurd length": (
        json.dumps(_row(0, isl=MAX_TRACE_TOKENS + 1)) + "\n",
        f":1: input_length: {MAX_TRACE_TOKENS + 1} is not",
    ),
    "fractional length": (json.dumps(_row(0, osl=1.5)) + "\n", "output_length: 1.5"),  # type: ignore[arg-type]
    "wrong key": (
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "prompt": 1}\n',
        "prompt",
    ),
    "missing key": ('{"timestamp": 0, "input_length": 5}\n', "output length"),
    "not json": ("{oops\n", ":1: not JSON"),
    "not an object": ("[1, 2]\n", ":1: not a JSON object"),
    "too many ids": (json.dumps(_row(0, isl=10, ids=[1, 2])) + "\n", "hash_ids: 2 ids"),
    "bad ids": (json.dumps(_row(0, ids=["x"])) + "\n", "hash_ids: not a list"),  # type: ignore[list-item]
    "nan time": ('{"timestamp": NaN, "input_length": 5, "output_length": 1}\n', "finite"),
    "long line": ("x" * (MAX_TRACE_LINE_BYTES + 5) + "\n", ":1: line longer than"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_trace_is_one_line_naming_the_line_and_field(tmp_path: Path, case: str) -> None:
    text, expected = BAD[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_trace(path)
    message = str(err.value)
    assert expected in message and "\n" not in message


def test_non_utf8_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(_row(0)).encode() + b"\n" + b'{"timestamp": 1, "x": "\xff"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: not UTF-8"):
        load_trace(path)


def test_too_many_lines_stop_at_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_file, "MAX_TRACE_LINES", 10)
    path = _jsonl(tmp_path, [_row(i) for i in range(11)])
    with pytest.raises(InputError, match=r":11: more than 10 requests"):
        load_trace(path)


def test_a_folder_or_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a folder"):
        load_trace(tmp_path)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        load_trace(fifo)
    with pytest.raises(InputError, match="cannot read"):
        load_trace(tmp_path / "missing.jsonl")


def test_predict_exits_2_with_one_line_on_a_bad_trace(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [_row(5), _row(1)])
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trace", str(path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and ":2: timestamp" in lines[0]


def test_trace_and_lengths_are_exclusive(tmp_path: Path) -> None:
    lengths = tmp_path / "l.csv"
    lengths.write_text("input,output\n5,5\n", encoding="utf-8")
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trace", str(SAMPLE)]
    result = runner.invoke(app, [*args, "--lengths", str(lengths)])
    assert result.exit_code == 2 and "exclusive" in result.stderr
