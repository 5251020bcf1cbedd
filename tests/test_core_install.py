"""`pip install .` without extras: the core commands run (scripts/check_core_install.sh)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_core_install_starts_tunes_and_names_the_engine_extra() -> None:
    if shutil.which("python3") is None:
        pytest.skip("no python3 to build a fresh venv with")
    done = subprocess.run(
        [str(ROOT / "scripts" / "check_core_install.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a 30-trial tune finished" in done.stdout
