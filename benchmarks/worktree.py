"""Another commit of this repository, checked out into a temporary git worktree for a benchmark
that compares it with the working tree (run with PYTHONPATH=<tree> so its tuner imports first)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """The tree of `ref` in a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), ref],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
