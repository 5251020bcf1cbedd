"""The code stays ruff- and mypy-clean (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "args",
    [
        ["ruff", "check", "tuner", "tests", "benchmarks"],
        ["ruff", "format", "--check", "tuner", "tests", "benchmarks"],
        ["mypy", "tuner"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tool_is_clean(args: list[str]) -> None:
    if shutil.which(args[0], path=str(Path(sys.executable).parent)) is None:
        pytest.skip(f"{args[0]} is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
