"""The AIConfigurator side-by-side benchmark's plumbing, with a stand-in for AIConfigurator.

AIConfigurator itself is an optional install that never runs in a test; here a fake runner
answers every row with TTFT 20% high and TPOT 10% low, and refuses one row.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import aiconfigurator_compare as compare  # noqa: E402

FAKE_RUNNER = """
import json, sys
for i, line in enumerate(sys.stdin):
    row = json.loads(line)
    if i == 0:
        print(json.dumps({"id": row["id"], "refused": "no data"}))
    else:
        print(json.dumps({"id": row["id"], "ttft_ms": 1.2 * float(row["silicon_ttft_ms"]),
                          "tpot_ms": 0.9 * float(row["silicon_tpot_ms"])}))
"""


def _fake_python(tmp_path: Path) -> str:
    """An 'interpreter' that runs the fake runner whatever script it is given."""
    runner = tmp_path / "fake_runner.py"
    runner.write_text(FAKE_RUNNER)
    exe = tmp_path / "fake-python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{runner}"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


@pytest.mark.skipif(os.name != "posix", reason="the stand-in interpreter is a shell script")
def test_both_tools_are_scored_on_the_rows_both_predicted_and_refusals_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "answers.jsonl"
    args = ["--aic-python", _fake_python(tmp_path), "--every", "40", "--cache", str(cache)]
    assert compare.main(args) == 0
    out = capsys.readouterr().out
    rows = compare.distinct_rows(compare.DEFAULT_CSV, 40, None)
    answers = [json.loads(x) for x in cache.read_text().splitlines()]
    assert len(answers) == len(rows) and sum("refused" in a for a in answers) == 1
    line = next(x for x in out.splitlines() if x.startswith("all "))
    both, ttft_ours, ttft_aic, tpot_ours, tpot_aic, skipped, refused = line.split()[1:]
    assert ttft_aic == "20.0%" and tpot_aic == "10.0%" and refused == "1"
    assert int(both) == len(rows) - 1 - int(skipped)
    # a rerun reads the cache and never starts the runner
    assert compare.main(["--every", "40", "--cache", str(cache)]) == 0
    assert "all " in capsys.readouterr().out
