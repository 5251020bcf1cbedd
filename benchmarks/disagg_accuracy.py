"""Replay benchmarks/data/disagg_public.csv with the simulator's disaggregated path; report errors.

Each distinct row (`duplicate_of` empty) is one measured prefill/decode deployment serving a
closed loop of C users; `disagg_rows.row_case` turns it into a Deployment (both pools' workers
and layouts), the measured protocol's Workload and the model, and `tuner.perf.disagg.
predict_disagg` predicts its mean TTFT and TPOT. Printed: median absolute and signed error of
both, over all scored rows, per engine and per GPU, and each reason a row was not expressed
(the row lacks what a replay needs, or holds what the simulator cannot) or predicted infeasible.
Only shared constants may be tuned against these rows, as for `accuracy.py`.

    python benchmarks/disagg_accuracy.py [--csv PATH] [--limit N] [--jobs N] [--json]

`--limit N` predicts N of the expressible rows, spread evenly over the file (a quick run);
the rows that cannot be expressed are counted all the same (that costs nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import disagg_rows
import silicon

from tuner import catalog
from tuner.errors import InputError
from tuner.perf.disagg import predict_disagg
from tuner.perf.efficiency import Efficiency
from tuner.specs import Context

NOT_EXPRESSED = "not expressed: "
INFEASIBLE = "predicted infeasible: "
MAX_JOBS = 64


def predict_case(
    row: dict[str, str], case: disagg_rows.DisaggCase, eff: Efficiency | None = None
) -> silicon.SiliconResult:
    """Predict one expressible row's mean TTFT and TPOT, or say why it is infeasible."""
    res = _result(row)
    gpu = catalog.load_gpu(case.gpu)
    ctx = Context(
        model=case.model,
        gpu=gpu,
        sla=silicon.NO_SLA,
        workload=case.workload,
        num_gpus=case.deployment.gpus,
    )
    try:
        metrics = predict_disagg(case.deployment, ctx, node=catalog.node_for_gpu(gpu), eff=eff)
    except InputError as exc:
        res.skipped = NOT_EXPRESSED + str(exc)
        return res
    if not metrics.feasible:
        res.skipped = INFEASIBLE + (metrics.reason or "no reason given")
        return res
    res.predicted_ttft_ms, res.predicted_tpot_ms = metrics.ttft_ms.mean, metrics.tpot_ms.mean
    return res


def _result(row: dict[str, str]) -> silicon.SiliconResult:
    return silicon.SiliconResult(
        row["id"], row["backend"], float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    )


def spread(items: list[Any], limit: int | None) -> list[Any]:
    """`limit` items spread evenly over `items` (all of them when None)."""
    if limit is None or limit >= len(items):
        return items
    step = len(items) / max(1, limit)
    return [items[int(i * step)] for i in range(limit)]


def score(
    path: Path = disagg_rows.DEFAULT_CSV, limit: int | None = None, jobs: int = 1
) -> tuple[list[dict[str, str]], list[silicon.SiliconResult]]:
    """The distinct rows; the results of those not expressible and of `limit` others."""
    rows = disagg_rows.load_rows(path)
    results, cases = [], []
    for row in rows:
        try:
            cases.append((row, disagg_rows.row_case(row)))
        except disagg_rows.NotExpressible as exc:
            results.append(dataclasses.replace(_result(row), skipped=NOT_EXPRESSED + str(exc)))
    chosen = spread(cases, limit)
    if jobs > 1 and chosen:
        with ProcessPoolExecutor(jobs) as pool:
            results += pool.map(predict_case, *zip(*chosen, strict=True))
    else:
        results += [predict_case(row, case) for row, case in chosen]
    return rows, results


def _skip_counts(results: list[silicon.SiliconResult]) -> dict[str, int]:
    """How many rows each reason left unscored, most frequent first."""
    counts = Counter(r.skipped for r in results if r.skipped)
    return dict(counts.most_common())


def report(rows: list[dict[str, str]], results: list[silicon.SiliconResult]) -> dict[str, Any]:
    """Error summaries overall, per engine and per GPU, and the unscored rows' reasons."""
    gpu_of = {r["id"]: r["system"] for r in rows}
    by_gpu = [dataclasses.replace(r, engine=gpu_of[r.row_id]) for r in results]
    return {
        "rows": len(results),
        "scored": sum(1 for r in results if r.skipped is None),
        "by_engine": silicon.summarize_errors(results),
        "by_gpu": silicon.summarize_errors(by_gpu),
        "not_scored": _skip_counts(results),
    }


def _print_table(title: str, summary: dict[str, dict[str, float]]) -> None:
    """One summary table: rows, median |err| and median signed error of TTFT and TPOT."""
    width = max([8, *map(len, summary)])
    print(f"\n{title}")
    print(f"  {'':{width}} {'rows':>5} {'TTFT |err|':>11} {'TPOT |err|':>11} "
          f"{'TTFT bias':>10} {'TPOT bias':>10}")  # fmt: skip
    for name, s in summary.items():
        print(
            f"  {name:{width}} {int(s['rows']):5d} {s['ttft_median_abs_pct']:10.1f}% "
            f"{s['tpot_median_abs_pct']:10.1f}% {s['ttft_median_signed_pct']:+9.1f}% "
            f"{s['tpot_median_signed_pct']:+9.1f}%"
        )


def print_report(summary: dict[str, Any]) -> None:
    """The report as text: both tables, then the unscored rows by reason."""
    print(f"disagg rows (closed-loop mean TTFT/TPOT): {summary['rows']} distinct measurements, "
          f"{summary['scored']} scored")  # fmt: skip
    _print_table("per engine", summary["by_engine"])
    _print_table("per GPU", summary["by_gpu"])
    print("\nnot scored:")
    for reason, count in summary["not_scored"].items():
        print(f"  {count:4d}  {reason}")


def main(argv: list[str] | None = None) -> int:
    """Replay the rows and print (or --json) the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=disagg_rows.DEFAULT_CSV)
    ap.add_argument(
        "--limit", type=int, default=None, help="predict N expressible rows spread over the file"
    )
    ap.add_argument("--jobs", type=int, default=1, help="processes predicting rows (1-64)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows, results = score(args.csv, args.limit, max(1, min(args.jobs, MAX_JOBS)))
    summary = report(rows, results)
    if args.json:
        print(json.dumps(summary))
    else:
        print_report(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
