"""Search efficiency: fraction of the true Pareto hypervolume each sampler reaches per budget.

The space below is small enough to enumerate with the sim backend, so the true front is known
exactly. Each (sampler, seed) study runs to the largest budget once; the hypervolume after the
first 25/50/100/200 trials is read from its history (a sampler's proposals do not depend on the
budget). All hypervolumes use the same SLA-based reference point: (TTFT bound, TPOT bound,
0 tok/s). Also times a default `tuner tune` run (sim backend, default space, 200 trials).

    python benchmarks/search_efficiency.py [--seeds 5] [--samplers tpe,nsga2,random,grid]

Measured on the 2-core dev box (5 seeds; % of true HV, mean [min]):
    sampler       25             50            100            200
    tpe         78.1 [47.8]    98.0 [94.3]    99.5 [99.3]   100.0 [99.9]
    nsga2       63.7 [48.7]    78.8 [61.7]    91.9 [79.9]    99.6 [98.3]
    random      63.7 [48.7]    76.3 [59.3]    90.1 [84.0]    93.4 [85.4]
    default `tuner tune` (sim, default space, 200 trials): 15.1 s wall
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from tuner import catalog
from tuner.backends import get_backend
from tuner.run_spec import DEFAULT_TUNE_CONCURRENCY
from tuner.search import study as search
from tuner.search.pareto import analyze, hypervolume_history, to_minimization
from tuner.search.trials import KNOBS, TrialRecord
from tuner.specs import Context, EngineConfig, Metrics, SearchSpace, Workload
from tuner.validity import invalid_reason

BUDGETS = (25, 50, 100, 200)
SPACE = SearchSpace(
    name="enumerable",
    quantization=["bf16", "fp8", "int8-wo", "int4-awq"],
    kv_dtype=["auto", "fp8"],
    max_num_batched_tokens=[1024, 2048, 4096, 8192],
    max_num_seqs=[4, 8, 16, 32, 64, 128, 256],
    tensor_parallel_size=[1, 2, 4],
    num_speculative_tokens=[0, 2, 4],
    draft_model=[None, "ngram"],
    enable_prefix_caching=[True],
)


class MemoBackend:
    """Shares sim evaluations across studies (the sim is deterministic for a seeded workload)."""

    name = "sim"

    def __init__(self) -> None:
        self.inner = get_backend("sim")
        self.memo: dict[tuple[object, ...], Metrics] = {}

    def evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        key = config.key()
        if key not in self.memo:
            self.memo[key] = self.inner.evaluate(config, ctx)
        return self.memo[key]


def _context() -> Context:
    return Context(
        model=catalog.load_model("llama-3.1-8b"),
        gpu=catalog.load_gpu("h200-sxm"),
        sla=catalog.load_sla("chat"),
        workload=Workload(concurrency=DEFAULT_TUNE_CONCURRENCY),
    )


def enumerate_space(space: SearchSpace, ctx: Context, backend: MemoBackend) -> list[TrialRecord]:
    """Every valid variant of the space, evaluated."""
    records = []
    knobs = list(KNOBS)
    for values in itertools.product(*(search.grid_values(getattr(space, k)) for k in knobs)):
        cfg = search.config_from_params(dict(zip(knobs, values, strict=True)))
        if isinstance(cfg, str) or invalid_reason(cfg, ctx) or cfg.key() in backend.memo:
            continue
        m = backend.evaluate(cfg, ctx)
        records.append(TrialRecord(number=len(records), state="complete", params={},
                                   config=cfg, metrics=m))  # fmt: skip
    return records


def study_history(sampler: str, seed: int, ctx: Context, backend: MemoBackend,
                  reference: list[float]) -> list[float]:  # fmt: skip
    """Hypervolume after each trial of one seeded study of max(BUDGETS) trials."""
    optuna_sampler = search.make_sampler(sampler, seed=seed, space=SPACE, ctx=ctx)
    study = search.create_study(None, f"{sampler}-{seed}", ctx.sla, optuna_sampler)
    search.optimize(study, search.Evaluator(backend, ctx, SPACE), trials=max(BUDGETS))
    records = search.records(study)
    res = analyze(records, ctx.sla, reference=reference)
    feasible = set(res.feasible)
    rows = [
        to_minimization([r.objective_values(ctx.sla)], res.maximize)[0]
        if r.number in feasible else [float("nan")] * len(reference)
        for r in records
    ]  # fmt: skip
    return hypervolume_history(rows, reference)


def time_default_tune(trials: int) -> float:
    """Wall time of `tuner tune` (sim, default space) as a user runs it."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from tuner.cli import main; main()", "tune",
               "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat",
               "--trials", str(trials), "--run-dir", str(Path(tmp) / "run")]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    """Print the efficiency table and the default-run time."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--samplers", default="tpe,nsga2,random")
    ap.add_argument("--skip-tune-timing", action="store_true")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ctx, backend = _context(), MemoBackend()
    start = time.perf_counter()
    truth = enumerate_space(SPACE, ctx, backend)
    true_res = analyze(truth, ctx.sla)
    reference = true_res.reference
    print(f"space: {len(truth)} valid variants, {len(true_res.feasible)} meet the SLA, "
          f"true front {len(true_res.front)} points, HV {true_res.hypervolume:.4g} "
          f"(enumerated in {time.perf_counter() - start:.1f} s)")  # fmt: skip
    header = f"{'sampler':8s} " + " ".join(f"{b:>14d}" for b in BUDGETS) + "   (mean [min] of "
    print(header + f"{args.seeds} seeds, % of true HV)")
    for sampler in args.samplers.split(","):
        t0 = time.perf_counter()
        fractions: dict[int, list[float]] = {b: [] for b in BUDGETS}
        for seed in range(args.seeds):
            hist = study_history(sampler, seed, ctx, backend, reference)
            for b in BUDGETS:
                fractions[b].append(hist[min(b, len(hist)) - 1] / true_res.hypervolume)
        cells = " ".join(
            f"{100 * statistics.mean(v):7.1f} [{100 * min(v):4.1f}]" for v in fractions.values()
        )
        print(f"{sampler:8s} {cells}   {time.perf_counter() - t0:.1f} s")
    if not args.skip_tune_timing:
        wall = time_default_tune(200)
        print(f"default `tuner tune` (sim, default space, 200 trials): {wall:.1f} s wall")


if __name__ == "__main__":
    main()
