"""Evaluations per second of the full sim backend (500 requests, ISL 1024, OSL 256, concurrency 64).

Target: >= 20 evaluations/s on one core. Also times a variant with +-50% length spread (many
more scheduler events than identical lengths) and one with Poisson arrivals, side by side.
Each evaluation is a fresh SimBackend.evaluate (memory plan, step costs, simulation, metrics).

    python benchmarks/sim_speed.py [--model llama-3.1-8b] [--gpu h200-sxm] [--seconds 3]
"""

from __future__ import annotations

import argparse
import sys
import time

from tuner import catalog
from tuner.backends.sim import SimBackend
from tuner.specs import Context, EngineConfig, Workload

TARGET_EVALS_PER_S = 20.0


def _rate(
    backend: SimBackend, config: EngineConfig, ctx: Context, seconds: float
) -> tuple[float, int]:
    """Evaluations per second over at least `seconds` (after one warm-up), and engine steps."""
    metrics = backend.evaluate(config, ctx)
    assert metrics.feasible, metrics.reason
    count, start = 0, time.perf_counter()
    while True:
        backend.evaluate(config, ctx)
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count / elapsed, int(metrics.extra["engine_steps"])  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """Print evaluations/s for the reference workload and two harder variants."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    model, gpu, sla = (
        catalog.load_model(args.model),
        catalog.load_gpu(args.gpu),
        catalog.load_sla("chat"),
    )
    base = {"input_tokens": 1024, "output_tokens": 256, "num_requests": 500}
    cases = {
        "reference: concurrency 64": Workload(**base, concurrency=64),
        "concurrency 64, lengths +-50%": Workload(**base, concurrency=64, length_spread=0.5),
        "Poisson 10 req/s, lengths +-50%": Workload(**base, rate_rps=10.0, length_spread=0.5),
    }
    backend = SimBackend()
    config = EngineConfig()
    reference = 0.0
    limits = f"{config.max_num_seqs} seqs, {config.max_num_batched_tokens} tokens/step"
    print(f"{args.model} on {args.gpu}, {limits}")
    for label, workload in cases.items():
        ctx = Context(model=model, gpu=gpu, sla=sla, workload=workload)
        rate, steps = _rate(backend, config, ctx, args.seconds)
        reference = reference or rate
        print(f"  {label:34} {rate:8.1f} evaluations/s  ({steps} engine steps each)")
    verdict = "meets" if reference >= TARGET_EVALS_PER_S else "MISSES"
    print(
        f"reference {reference:.1f} evaluations/s {verdict} the target of {TARGET_EVALS_PER_S:g}/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
