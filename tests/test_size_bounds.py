"""Issue 33, item 5: every size a flag or file gives has an upper bound, stated in the help.

Each reproduction of the issue (a plan of 10^8 requests grew to 24 GB; --jobs 1000 forked 999
workers; a lengths value past 2^63, a 100k-deep JSONL line, /dev/zero or a FIFO as a lengths
file) is now one input error line, exit 2, before any work.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tuner.bench.lengths import MAX_LENGTHS_FILE_BYTES, load_length_pairs
from tuner.cli import app
from tuner.cli.options import MAX_JOBS
from tuner.errors import InputError
from tuner.specs import MAX_REQUEST_TOKENS, MAX_REQUESTS, MAX_SEED, MAX_USERS, Workload

pytestmark = pytest.mark.unit
runner = CliRunner()
PLAN = ["plan", "--model", "llama-3.1-8b", "--gpus", "h100-sxm"]


def _input_error(result) -> str:  # noqa: ANN001 (click Result)
    """The command exited 2 with one `error:` line and no traceback; that line."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--rate", "1", "--num-requests", "100000000"], "--num-requests"),
        (["--rate", "1", "--isl", str(MAX_REQUEST_TOKENS + 1)], "--isl"),
        (["--users", "1000000000"], "--users"),
        (["--rate", "1", "--max-gpus-per-replica", "100000"], "--max-gpus-per-replica"),
    ],
)
def test_plan_refuses_sizes_past_their_bound(args: list[str], flag: str, tmp_path: Path) -> None:
    line = _input_error(runner.invoke(app, [*PLAN, *args, "--run-dir", str(tmp_path / "p")]))
    assert flag in line
    assert not (tmp_path / "p").exists()


def test_tune_refuses_more_jobs_than_its_bound(tmp_path: Path) -> None:
    argv = ["tune", "--model", "llama-3.2-1b", "--gpu", "h200-sxm", "--jobs", "1000"]
    line = _input_error(runner.invoke(app, [*argv, "--run-dir", str(tmp_path / "r")]))
    assert "--jobs" in line and str(MAX_JOBS) in line


@pytest.mark.parametrize(
    "args",
    [
        ["--num-requests", str(MAX_REQUESTS + 1)],
        ["--concurrency", str(MAX_USERS + 1)],
        ["--warmup", str(MAX_REQUESTS + 1)],
        ["--osl", str(MAX_REQUEST_TOKENS + 1)],
        ["--seed", str(MAX_SEED + 1)],
        ["--timeout", "1e9"],
    ],
)
def test_bench_refuses_sizes_past_their_bound(args: list[str]) -> None:
    _input_error(runner.invoke(app, ["bench", "--url", "http://127.0.0.1:9", *args]))


@pytest.mark.parametrize(
    ("command", "bound"),
    [
        (["plan"], str(MAX_REQUESTS)),
        (["bench"], str(MAX_USERS)),
        (["tune"], str(MAX_JOBS)),
        (["tune"], str(MAX_REQUESTS)),
    ],
)
def test_the_help_states_each_bound(command: list[str], bound: str) -> None:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and bound in result.output


@pytest.mark.parametrize(
    "field",
    [
        {"num_requests": MAX_REQUESTS + 1},
        {"concurrency": MAX_USERS + 1},
        {"input_tokens": MAX_REQUEST_TOKENS + 1},
        {"seed": -1},
        {"seed": MAX_SEED + 1},
    ],
)
def test_the_workload_noun_holds_the_bounds_for_every_caller(field: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        Workload(**field)  # type: ignore[arg-type]


# -- the lengths file ------------------------------------------------------------------------------


def _lengths_error(path: str | Path) -> str:
    with pytest.raises(InputError) as err:
        load_length_pairs(path)
    text = str(err.value)
    assert "\n" not in text and len(text) < 600
    return text


def test_a_length_past_2_to_the_63_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_text(f"input_tokens,output_tokens\n{2**64},5\n")
    assert "out of range" in _lengths_error(path)


def test_a_length_past_the_token_bound_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_text(f'{{"input": {MAX_REQUEST_TOKENS + 1}, "output": 4}}\n')
    assert str(MAX_REQUEST_TOKENS) in _lengths_error(path)


def test_a_100k_deep_jsonl_line_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    assert "l.jsonl:1" in _lengths_error(path)


def test_a_deep_but_short_jsonl_line_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_text('{"input": ' + "[" * 1500 + "]" * 1500 + "}\n")
    _lengths_error(path)


def test_dev_zero_is_refused_without_reading_it() -> None:
    assert "not a regular file" in _lengths_error("/dev/zero")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "lengths.csv"
    os.mkfifo(fifo)
    assert "not a regular file" in _lengths_error(fifo)


def test_a_folder_is_refused(tmp_path: Path) -> None:
    assert "is a folder" in _lengths_error(tmp_path)


def test_a_file_over_the_byte_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    with path.open("wb") as f:
        f.write(b"input_tokens,output_tokens\n")
        f.truncate(MAX_LENGTHS_FILE_BYTES + 1)  # sparse: no disk used
    assert "larger than" in _lengths_error(path)


def test_bench_with_a_folder_as_lengths_file_exits_2(tmp_path: Path) -> None:
    line = _input_error(
        runner.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--lengths", str(tmp_path)])
    )
    assert "is a folder" in line


def test_a_catalog_yaml_over_the_byte_cap_is_refused_unread(tmp_path: Path) -> None:
    from tuner.yaml_read import MAX_TEXT_BYTES

    sla = tmp_path / "sla.yaml"
    with sla.open("wb") as f:
        f.write(b"name: big\n")
        f.truncate(MAX_TEXT_BYTES + 1)  # sparse
    argv = [*PLAN, "--rate", "1", "--sla", str(sla), "--run-dir", str(tmp_path / "p")]
    assert "larger than" in _input_error(runner.invoke(app, argv))
