"""tuner's simulator and NVIDIA's AIConfigurator on the same measured rows, side by side.

AIConfigurator (PyPI `aiconfigurator`, Apache-2.0) needs Python 3.11+, pandas, pyarrow and scipy,
so it runs in its own environment, never in tuner's and never in a test:

    python3.11 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator
    python benchmarks/aiconfigurator_compare.py --aic-python /tmp/aic/bin/python \
        [--csv benchmarks/data/moe_public.csv] [--every 4] [--cache /tmp/aic_rows.jsonl]

Each distinct row is replayed by tuner exactly as `benchmarks/accuracy.py` replays it (the
row's client protocol, engine and layout) and estimated by AIConfigurator's `agg` mode from the
row's own columns (benchmarks/aiconfigurator_rows.py). Printed per engine: the rows both
predicted, each tool's median |error| of mean TTFT and TPOT on those rows, and the rows each
one refused. `--cache` keeps AIConfigurator's answers (one JSON line per row) for reruns.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import silicon

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE / "data" / "moe_public.csv"
RUNNER = HERE / "aiconfigurator_rows.py"


@dataclass
class EngineTally:
    """One engine's rows: signed percent errors of both tools on the rows both predicted."""

    ours: list[tuple[float, float]] = field(default_factory=list)
    theirs: list[tuple[float, float]] = field(default_factory=list)
    we_skipped: int = 0
    they_refused: int = 0


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def distinct_rows(csv_path: Path, every: int, limit: int | None) -> list[dict[str, str]]:
    """The CSV's rows without the duplicates it marks, every `every`-th, at most `limit`."""
    rows = [r for r in silicon.load_rows(csv_path) if not r.get("duplicate_of")]
    rows = rows[:: max(1, every)]
    return rows[:limit] if limit else rows


def aiconfigurator_estimates(
    rows: list[dict[str, str]], python: str | None, cache: Path | None
) -> dict[str, dict[str, object]]:
    """AIConfigurator's answer per row id: from `cache`, then from `python` for the rest."""
    known: dict[str, dict[str, object]] = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            if line.strip():
                doc = json.loads(line)
                known[str(doc["id"])] = doc
    missing = [r for r in rows if r["id"] not in known]
    if missing:
        if python is None:
            raise SystemExit(f"{len(missing)} rows have no cached estimate; pass --aic-python")
        lines = "".join(json.dumps(r) + "\n" for r in missing)
        proc = subprocess.run(
            [python, str(RUNNER)], input=lines, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"AIConfigurator runner failed: {proc.stderr.strip()[-500:]}")
        fresh = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        known.update({str(d["id"]): d for d in fresh})
        if cache is not None:
            with cache.open("a") as out:
                out.writelines(json.dumps(d) + "\n" for d in fresh)
    return known


def tally(
    rows: list[dict[str, str]], estimates: dict[str, dict[str, object]]
) -> dict[str, EngineTally]:
    """Both tools' errors per engine (and `all`), on the rows both of them predicted."""
    out: dict[str, EngineTally] = {}
    for row in rows:
        ours = silicon.predict_silicon_row(row)
        theirs = estimates.get(row["id"], {"refused": "no answer"})
        for key in (row["backend"], "all"):
            t = out.setdefault(key, EngineTally())
            if ours.skipped:
                t.we_skipped += 1
            if "refused" in theirs:
                t.they_refused += 1
            if ours.skipped or "refused" in theirs:
                continue
            m_ttft, m_tpot = ours.measured_ttft_ms, ours.measured_tpot_ms
            t.ours.append(ours.errors_pct())
            t.theirs.append(
                (
                    _pct(float(theirs["ttft_ms"]), m_ttft),  # type: ignore[arg-type]
                    _pct(float(theirs["tpot_ms"]), m_tpot),  # type: ignore[arg-type]
                )
            )
    return out


def _median_abs(errors: list[tuple[float, float]], i: int) -> float:
    return statistics.median(abs(e[i]) for e in errors) if errors else float("nan")


def report(tallies: dict[str, EngineTally]) -> list[str]:
    """The side-by-side table, one line per engine."""
    lines = [
        "engine   both  TTFT |err| tuner  AIConfigurator  TPOT |err| tuner  AIConfigurator"
        "  tuner skipped  AIConfigurator refused"
    ]
    for name in sorted(tallies, key=lambda k: (k == "all", k)):
        t = tallies[name]
        lines.append(
            f"{name:8s} {len(t.ours):5d}  {_median_abs(t.ours, 0):15.1f}% "
            f"{_median_abs(t.theirs, 0):14.1f}%  {_median_abs(t.ours, 1):15.1f}% "
            f"{_median_abs(t.theirs, 1):14.1f}%  {t.we_skipped:13d}  {t.they_refused:22d}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Estimate the rows with both tools and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-python", help="an interpreter with aiconfigurator installed")
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--every", type=int, default=1, help="every k-th distinct row (a sample)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="JSON lines of earlier answers")
    args = ap.parse_args(argv)
    rows = distinct_rows(args.csv, args.every, args.limit)
    estimates = aiconfigurator_estimates(rows, args.aic_python, args.cache)
    print(f"{args.csv.name}: {len(rows)} distinct rows (every {args.every})")
    print("\n".join(report(tally(rows, estimates))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
