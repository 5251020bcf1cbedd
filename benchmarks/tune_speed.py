"""Wall and CPU time of the default `tuner tune` here against the same tune at another commit.

Runs `tuner tune --model llama-3.1-8b --gpu h200-sxm --sla chat` (200 trials, capacity mode)
with this tree and with `--baseline REF` checked out into a temporary git worktree (imported
first through PYTHONPATH, so the same virtual environment runs both), alternating, and prints
each run and the ratio of the medians (target: under 30 s on 2 cores).

    python benchmarks/tune_speed.py [--baseline REF] [--repeats 2] [--trials 200]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from worktree import ROOT, worktree

TUNE = ["-m", "tuner", "tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]


def _run(tree: Path, trials: int, out: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one tune with `tree`'s tuner."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    args = [sys.executable, *TUNE, "--trials", str(trials), "--run-dir", str(out)]
    subprocess.run(args, cwd=tree, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    """Alternate the two trees' tunes and print the times and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD~1")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--trials", type=int, default=200)
    args = ap.parse_args(argv)
    times: dict[str, list[tuple[float, float]]] = {"here": [], "baseline": []}
    with worktree(args.baseline) as base, tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for name, tree in (("baseline", base), ("here", ROOT)):
                wall, cpu = _run(tree, args.trials, Path(tmp) / f"{name}-{i}")
                times[name].append((wall, cpu))
                print(f"{name:8} run {i + 1}: {wall:6.1f} s wall, {cpu:6.1f} s CPU")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in times.items()}  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}; {args.trials} trials; baseline {args.baseline}")
    for name, (wall, cpu) in med.items():
        print(f"{name:8} median {wall:6.1f} s wall, {cpu:6.1f} s CPU")
    print(f"ratio here/baseline: {med['here'][0] / med['baseline'][0]:.2f} wall, "
          f"{med['here'][1] / med['baseline'][1]:.2f} CPU")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
