"""Before and after: `benchmarks/accuracy.py --json` here and at another commit, side by side.

The baseline runs from a temporary git worktree of `--baseline REF` (imported first through
PYTHONPATH, so the same virtual environment runs both) on its own copy of the data; each block
(public rows, dense silicon, FP4, MoE) is printed per engine with both medians.

    python benchmarks/accuracy_compare.py [--baseline REF]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from worktree import ROOT, worktree

BLOCKS = (("silicon", "dense silicon"), ("fp4", "FP4"), ("moe", "MoE"))


def _accuracy(tree: Path) -> dict[str, Any]:
    """`accuracy.py --json` of `tree`'s tuner on `tree`'s data."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "accuracy.py"), "--json"],
        cwd=tree, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def _print(base: dict[str, Any], here: dict[str, Any], ref: str) -> None:
    print(f"median |error| (%), baseline {ref} -> here")
    metrics = [k for k, v in here.items() if isinstance(v, dict) and "median_abs_error_pct" in v]
    for k in metrics:
        b = base.get(k, {}).get("median_abs_error_pct")
        shown = "-" if b is None else f"{b:5.1f}"
        print(f"  public {k:27} {shown} -> {here[k]['median_abs_error_pct']:5.1f}")
    for key, title in BLOCKS:
        print(f"{title}: engine rows  TTFT before -> after   TPOT before -> after")
        for engine, s in here.get(key, {}).items():
            b = base.get(key, {}).get(engine, {})
            print(
                f"  {engine:8} {s['rows']:5d}  {b.get('ttft_median_abs_pct', float('nan')):5.1f}"
                f" -> {s['ttft_median_abs_pct']:5.1f}      "
                f"{b.get('tpot_median_abs_pct', float('nan')):5.1f} -> "
                f"{s['tpot_median_abs_pct']:5.1f}"
            )


def main(argv: list[str] | None = None) -> int:
    """Run both and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD~1")
    args = ap.parse_args(argv)
    with worktree(args.baseline) as tree:
        base = _accuracy(tree)
    _print(base, _accuracy(ROOT), args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
