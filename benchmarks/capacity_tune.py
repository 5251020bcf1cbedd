"""Capacity-mode tune: wall time against a fixed-load tune, and search efficiency.

1. Wall time of the default `tuner tune` (capacity mode: each variant's highest Poisson rate
   meeting the SLA) and of a fixed-load tune (`--concurrency 32`), same machine, same trials,
   alternated in one run (target: capacity tune under 30 s on 2 cores at 200 trials).
2. Search efficiency in capacity mode: share of the exhaustive capacity frontier's hypervolume
   (TPOT at the SLA percentile vs output tok/s per GPU over every (variant, load) point of the
   enumerable space of benchmarks/search_efficiency.py) that TPE reaches after 50/100/200 trials.

    python benchmarks/capacity_tune.py [--trials 200] [--repeats 1] [--seeds 3] [--skip-timing]

Measured on the shared 2-core dev box (other jobs running, so wall seconds vary with their load;
CPU seconds are the steadier figure), 200 trials:
    load avg 10-15: capacity 157.3 s wall, 33.1 s CPU; fixed 69.8 s wall, 25.6 s CPU
    load avg ~5:    capacity  27.0 s wall, 23.6 s CPU; fixed 31.8 s wall, 24.6 s CPU
    load avg ~3 (median of 2): capacity 34.5 s wall, 31.0 s CPU; fixed 27.9 s wall, 25.1 s CPU
    with the journal study (no SQLite, no fsync per write) and the faster simulator step,
    load avg 3-4 (median of 2): capacity 23.0 s wall, 12.4 s CPU; fixed 10.1 s wall, 6.2 s CPU
    load avg 1.2-1.5 (median of 2): capacity 12.0 s wall, 12.1 s CPU; fixed 5.8 s wall, 5.9 s CPU
    (the code before, same minute: capacity 23.2 s wall, 23.3 s CPU; fixed 17.5 s, 17.6 s CPU)
    open-loop capacity probes sized for steady state (warm-up = one batch filling by Little's
    law; capacity capped at the saturated rate), load avg 0.7-0.9: capacity 25.3 s wall,
    24.8 s CPU; fixed 8.0 s wall, 8.0 s CPU
    with the saturation cap and steady-state probes: 2016 valid variants, exhaustive frontier
        78 distinct points; tpe, 3 seeds: 50: 95.0% [min 92.3], 100: 96.8% [min 92.5],
        200: 99.4% [min 99.3]
    before them: 2016 valid variants, exhaustive frontier 64 distinct points
    tpe capacity study, 3 seeds, share of exhaustive HV: 50: 84.0% [min 71.9],
        100: 97.4% [min 94.5], 200: 99.3% [min 99.3]
"""

from __future__ import annotations

import argparse
import itertools
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from tuner import catalog
from tuner.backends import evaluate_capacity, get_backend
from tuner.perf.load import Capacity
from tuner.search import study as search
from tuner.search.frontier import capacity_frontier, frontier_history
from tuner.search.trials import KNOBS, TrialRecord
from tuner.specs import Context, EngineConfig, Metrics, Workload
from tuner.validity import invalid_reason

sys.path.insert(0, str(Path(__file__).parent))
from search_efficiency import SPACE  # noqa: E402

BUDGETS = (50, 100, 200)


class MemoCapacityBackend:
    """Shares capacity searches across studies (the sim is deterministic for a seeded workload)."""

    name = "sim"

    def __init__(self) -> None:
        self.inner = get_backend("sim")
        self.memo: dict[tuple[object, ...], tuple[Capacity, Metrics]] = {}

    def evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Fixed-load evaluation (unused by capacity studies)."""
        return self.inner.evaluate(config, ctx)

    def capacity_search(
        self, config: EngineConfig, ctx: Context, **kw: object
    ) -> tuple[Capacity, Metrics]:
        """Memoised capacity search."""
        key = config.key()
        if key not in self.memo:
            self.memo[key] = evaluate_capacity(self.inner, config, ctx)  # type: ignore[arg-type]
        return self.memo[key]


def _context() -> Context:
    return Context(model=catalog.load_model("llama-3.1-8b"), gpu=catalog.load_gpu("h200-sxm"),
                   sla=catalog.load_sla("chat"), workload=Workload())  # fmt: skip


def time_tune(trials: int, extra: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one `tuner tune` subprocess as a user runs it.

    The CPU seconds (user + system of the child) do not grow when other processes share the
    cores; on an idle machine the single-threaded tune's wall time is close to them.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "tuner", "tune", "--model", "llama-3.1-8b", "--gpu",
               "h200-sxm", "--sla", "chat", "--trials", str(trials),
               "--run-dir", str(Path(tmp) / "run"), *extra]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def exhaustive(ctx: Context, backend: MemoCapacityBackend) -> list[TrialRecord]:
    """Every valid variant of the space with its capacity search."""
    records = []
    knobs = list(KNOBS)
    for values in itertools.product(*(search.grid_values(getattr(SPACE, k)) for k in knobs)):
        cfg = search.config_from_params(dict(zip(knobs, values, strict=True)))
        if isinstance(cfg, str) or invalid_reason(cfg, ctx) or cfg.key() in backend.memo:
            continue
        cap, m = backend.capacity_search(cfg, ctx)
        records.append(TrialRecord(number=len(records), state="complete", params={}, config=cfg,
                                   metrics=m, capacity=cap))  # fmt: skip
    return records


def study_history(seed: int, ctx: Context, backend: MemoCapacityBackend,
                  reference: list[float]) -> list[float]:  # fmt: skip
    """Frontier hypervolume after each trial of one seeded TPE capacity study."""
    study = search.create_study(
        None,
        f"tpe-{seed}",
        ctx.sla,
        search.make_sampler("tpe", seed=seed, space=SPACE),
        capacity=True,
    )
    evaluator = search.Evaluator(backend, ctx, SPACE, capacity="rate")  # type: ignore[arg-type]
    search.optimize(study, evaluator, trials=max(BUDGETS))
    return frontier_history(search.records(study), ctx.sla, reference)[1]


def main() -> None:
    """Print the side-by-side wall times and the efficiency table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--skip-efficiency", action="store_true")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not args.skip_timing:
        runs: dict[str, list[tuple[float, float]]] = {"capacity (default)": [], "fixed": []}
        for _ in range(args.repeats):
            runs["capacity (default)"].append(time_tune(args.trials, []))
            runs["fixed"].append(time_tune(args.trials, ["--concurrency", "32"]))
        for mode, times in runs.items():
            wall = statistics.median(t[0] for t in times)
            cpu = statistics.median(t[1] for t in times)
            label = mode if mode != "fixed" else "fixed (--concurrency 32)"
            print(f"tune {label:26s} {args.trials} trials: {wall:6.1f} s wall, {cpu:6.1f} s CPU "
                  f"(median of {len(times)})")  # fmt: skip
        cap, fixed = (statistics.median(t[1] for t in v) for v in runs.values())
        print(f"capacity / fixed CPU-time ratio: {cap / fixed:.2f}")
    if args.skip_efficiency:
        return
    ctx, backend = _context(), MemoCapacityBackend()
    start = time.perf_counter()
    truth = exhaustive(ctx, backend)
    reference = [float(ctx.sla.tpot_ms or 1.0), 0.0]
    true_hv = frontier_history(truth, ctx.sla, reference)[0]
    print(f"space: {len(truth)} valid variants, exhaustive frontier "
          f"{len(capacity_frontier(truth, ctx.sla))} distinct points, HV {true_hv:.4g} "
          f"({time.perf_counter() - start:.1f} s)")  # fmt: skip
    fractions: dict[int, list[float]] = {b: [] for b in BUDGETS}
    for seed in range(args.seeds):
        hist = study_history(seed, ctx, backend, reference)
        for b in BUDGETS:
            fractions[b].append(hist[min(b, len(hist)) - 1] / true_hv)
    cells = " ".join(f"{b}: {100 * statistics.mean(v):5.1f}% [min {100 * min(v):5.1f}]"
                     for b, v in fractions.items())  # fmt: skip
    print(f"tpe capacity study, {args.seeds} seeds, share of exhaustive HV: {cells}")


if __name__ == "__main__":
    main()
