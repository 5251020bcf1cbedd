"""Wall time of the issue's `tuner plan` command, end to end in a fresh process (imports included).

Target: under 60 s on 2 cores for five GPU kinds (rtx-4090, l40s, a100-80gb-sxm, h100-sxm,
h200-sxm), llama-3.1-8b, chat SLA, 50 req/s. Prints the command, its table and one timing line.

    python benchmarks/plan_speed.py [--rate 50] [--gpus a,b,c]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

TARGET_S = 60.0
GPUS = "rtx-4090,l40s,a100-80gb-sxm,h100-sxm,h200-sxm"


def main(argv: list[str] | None = None) -> int:
    """Run `python -m tuner plan ...` once and print its wall time against the target."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--rate", default="50")
    ap.add_argument("--gpus", default=GPUS)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "tuner", "plan", "--model", args.model, "--sla", "chat",
               "--rate", args.rate, "--gpus", args.gpus, "--run-dir", tmp]  # fmt: skip
        print("$ " + " ".join(cmd[1:]), flush=True)
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        wall = time.perf_counter() - start
    print(done.stdout, end="")
    if done.returncode != 0:
        print(done.stderr, end="", file=sys.stderr)
        return done.returncode
    verdict = "meets" if wall < TARGET_S else "MISSES"
    cores = len(os.sched_getaffinity(0))
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = child.ru_utime + child.ru_stime
    load = os.getloadavg()[0]
    print(
        f"plan wall time {wall:.1f} s ({cpu:.1f} s CPU; {cores} cores, load average {load:.1f}) "
        f"{verdict} the target of {TARGET_S:g} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
