"""CPU seconds of the serial and parallel phases of `tuner tune --jobs N`, and the idle-core
speed-up they imply.

benchmarks/jobs_speed.py measures wall time, which on a shared machine measures each run's share
of the cores. This runs the same tune in this process, notes the process's CPU time when the
workers start and after they exit, and the workers' CPU time (children, waited for), so

    serial   = start-up until the workers start + the report after they exit
    estimate = (serial + trials CPU of --jobs 1) / (serial + the busiest process's trials CPU)

is the --jobs N speed-up on N idle cores, whatever else shares them now (CPU seconds still grow
somewhat when other processes share the caches). Each tune runs in a fresh interpreter.

    python benchmarks/jobs_phases.py [--trials 200] [--jobs 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tuner.cli import app
from tuner.run import jobs

TUNE = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def phases(trials: int, count: int) -> dict[str, float]:
    """CPU seconds: before the workers start, this process's and the workers' trials, after."""
    marks: dict[str, float] = {}
    enter, leave = jobs.LocalWorkers.__enter__, jobs.LocalWorkers.__exit__

    def noted_enter(self: jobs.LocalWorkers) -> jobs.LocalWorkers:
        marks["start"] = _cpu(resource.RUSAGE_SELF)
        return enter(self)

    def noted_exit(self: jobs.LocalWorkers, *exc: Any) -> None:
        leave(self, *exc)
        marks["joined"] = _cpu(resource.RUSAGE_SELF)

    children = _cpu(resource.RUSAGE_CHILDREN)
    setattr(jobs.LocalWorkers, "__enter__", noted_enter)  # noqa: B010
    setattr(jobs.LocalWorkers, "__exit__", noted_exit)  # noqa: B010
    try:
        with tempfile.TemporaryDirectory(prefix="tuner-phases-") as tmp:
            argv = [*TUNE, "--trials", str(trials), "--jobs", str(count),
                    "--run-dir", str(Path(tmp) / "run")]  # fmt: skip
            with contextlib.redirect_stdout(io.StringIO()):
                app(argv, standalone_mode=False)
    finally:
        setattr(jobs.LocalWorkers, "__enter__", enter)  # noqa: B010
        setattr(jobs.LocalWorkers, "__exit__", leave)  # noqa: B010
    end = _cpu(resource.RUSAGE_SELF)
    return {
        "start": marks["start"],
        "tune_trials": marks["joined"] - marks["start"],
        "worker_trials": _cpu(resource.RUSAGE_CHILDREN) - children,
        "report": end - marks["joined"],
    }


def _phases_in_child(trials: int, count: int) -> dict[str, float]:
    """`phases` in a fresh interpreter, as a user's tune runs (start-up included)."""
    cmd = [sys.executable, __file__, "--trials", str(trials), "--only", str(count)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    """Print the phases of one --jobs 1 and one --jobs N tune and the idle-core speed-up."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", type=int, help=argparse.SUPPRESS)  # one tune, JSON out
    args = ap.parse_args(argv)
    if args.only is not None:
        print(json.dumps(phases(args.trials, args.only)))
        return 0
    load = os.getloadavg()[0]
    one = _phases_in_child(args.trials, 1)
    many = _phases_in_child(args.trials, args.jobs)
    serial = many["start"] + many["report"]
    busiest = max(many["tune_trials"], many["worker_trials"] / max(1, args.jobs - 1))
    estimate = (one["start"] + one["tune_trials"] + one["report"]) / (serial + busiest)
    print(f"{args.trials} trials, load average {load:.1f}; CPU seconds of each phase:")
    for name, p in ((" 1", one), (f"{args.jobs:>2}", many)):
        print(
            f"  --jobs {name}: start-up {p['start']:.2f}, trials: tune process "
            f"{p['tune_trials']:.2f}, workers {p['worker_trials']:.2f}; report {p['report']:.2f}"
        )
    print(f"idle-core speed-up estimate --jobs {args.jobs} vs --jobs 1: {estimate:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
