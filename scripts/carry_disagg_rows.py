"""Carry the disaggregated rows of AIConfigurator's silicon sample into benchmarks/data/.

Source: the PyPI package `aiconfigurator-core` (Apache-2.0), file
`aiconfigurator_core/systems/silicon_sample.csv`. Every `mode = disagg` row is written to
`benchmarks/data/disagg_public.csv` with the columns a replay needs, verbatim, and four added
ones: `source` (package and path), `protocol` (the client protocol of the row's source, by its
measurement date), `duplicate_of` (the id of the kept copy when the sample holds the same
measurement more than once) and `notes`. The Hugging Face configs of the models the catalog
lacks are copied from the package's `model_configs/` into `benchmarks/data/hf_configs/`.
benchmarks/data/README.md (`disagg_public.csv`) says what each added value means.

Run it with any Python 3.10+ (standard library only):

    python scripts/carry_disagg_rows.py \
        /path/to/site-packages/aiconfigurator_core/systems/silicon_sample.csv
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "disagg_public.csv"
HF_OUT = ROOT / "benchmarks" / "data" / "hf_configs"
POOL_FIELDS = ("num_workers", "batch_size", "tp_size", "pp_size", "attention_dp_size",
               "moe_tp_size", "moe_ep_size")  # fmt: skip
KEPT = [
    "id", "backend", "backend_version", "model_path", "system", "precision", "isl", "osl",
    "gemm_quant_mode", "moe_quant_mode",
    *(f"{phase}_{field}" for phase in ("prefill", "decode") for field in POOL_FIELDS),
    "silicon_ttft_ms", "silicon_tpot_ms", "silicon_data_source",
]  # fmt: skip
ADDED = ["source", "protocol", "duplicate_of", "notes"]
# Models the catalog lacks: our file name -> the package's model_configs/<org>--<name> file.
HF_CONFIGS = {
    "kimi-k2.5": "moonshotai--Kimi-K2.5",
    "kimi-k2.5-nvfp4": "nvidia--Kimi-K2.5-NVFP4",
    "glm-5": "zai-org--GLM-5",
}
# Which copy of a repeated measurement is kept: the db-dump one alone records the pools' worker
# counts and attention-DP layout; then the order moe_public.csv keeps.
SOURCE_RANK = ("db-dump/", "source_file=2026-03-25.csv", "source_file=2026-04-06.csv")
# srt-slurm's sa-bench (the client of InferenceMAX's multi-node runs): measured prompts per
# user by date (github.com/NVIDIA/srt-slurm, src/srtctl/benchmarks/scripts/sa-bench/bench.sh:
# 5C until 55698764, 8C until 88ff268d, then 10C).
SA_BENCH_ROUNDS = (("2026-01-21", 5), ("2026-01-23", 8))
SA_BENCH_LATEST = 10


def _field(row: dict[str, str], key: str) -> str | None:
    """The value of `key=value` in the row's silicon_data_source, or None."""
    m = re.search(rf"(?:^|;\s*){re.escape(key)}=([^;]*)", row["silicon_data_source"])
    return m.group(1).strip() if m else None


def protocol_of(row: dict[str, str]) -> str:
    """`aiperf` for AIConfigurator's gap-analysis rows, else `sa_bench_<N>x` by measured date."""
    if "aic-auto-gap-analysis" in row["silicon_data_source"]:
        return "aiperf"
    measured = (_field(row, "measured") or "9999")[:10]
    rounds = next((n for until, n in SA_BENCH_ROUNDS if measured < until), SA_BENCH_LATEST)
    return f"sa_bench_{rounds}x"


def notes_of(row: dict[str, str]) -> str:
    """What the row does not record, or records under another name."""
    notes = []
    if _field(row, "silicon_concurrency") is None:
        notes.append("no silicon_concurrency recorded")
    if not row["prefill_num_workers"] or not row["decode_num_workers"]:
        notes.append("pool worker counts not recorded")
    if row["id"].startswith("dsr1_") and row["model_path"].endswith("DeepSeek-V3"):
        notes.append("InferenceMAX DeepSeek-R1-0528 run, named DeepSeek-V3 by the db-dump")
    return "; ".join(notes)


def _rank(row: dict[str, str]) -> int:
    src = row["silicon_data_source"]
    return next((i for i, p in enumerate(SOURCE_RANK) if src.startswith(p)), len(SOURCE_RANK))


def _measurement(row: dict[str, str]) -> tuple[str, ...]:
    """What two copies of one measurement share: results, lengths, load, hardware, engine."""
    # The copies differ in the last printed digit (float noise): compare 12 significant digits.
    measured = (f"{float(row[k]):.12g}" for k in ("silicon_ttft_ms", "silicon_tpot_ms"))
    keys = ("system", "backend", "isl", "osl", "precision")
    return (*measured, *(row[k] for k in keys), _field(row, "silicon_concurrency") or row["id"])


def mark_duplicates(rows: list[dict[str, str]]) -> None:
    """Set `duplicate_of` on every copy of a measurement but the kept one (SOURCE_RANK)."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(_measurement(row), []).append(row)
    for copies in groups.values():
        kept = min(copies, key=_rank)  # stable: the first of equal rank
        for row in copies:
            row["duplicate_of"] = "" if row is kept else kept["id"]


def package_version(csv_path: Path) -> str:
    """The aiconfigurator-core version installed next to `csv_path` (its dist-info)."""
    site = csv_path.resolve().parents[2]
    for meta in sorted(site.glob("aiconfigurator_core-*.dist-info/METADATA")):
        for line in meta.read_text().splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def carry(csv_path: Path, out: Path = OUT, hf_out: Path = HF_OUT) -> list[dict[str, str]]:
    """Write the disagg rows of `csv_path` to `out` and the HF configs to `hf_out`."""
    source = (
        f"PyPI aiconfigurator-core {package_version(csv_path)}, "
        "aiconfigurator_core/systems/silicon_sample.csv"
    )
    with csv_path.open(newline="") as fh:
        rows = [{k: r[k] for k in KEPT} for r in csv.DictReader(fh) if r["mode"] == "disagg"]
    for row in rows:
        row.update(source=source, protocol=protocol_of(row), notes=notes_of(row))
    mark_duplicates(rows)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=KEPT + ADDED, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    configs = csv_path.resolve().parents[1] / "model_configs"
    hf_out.mkdir(parents=True, exist_ok=True)
    for name, stem in HF_CONFIGS.items():
        shutil.copyfile(configs / f"{stem}_config.json", hf_out / f"{name}.json")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Carry the rows and print how many, how many distinct."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="aiconfigurator_core/systems/silicon_sample.csv")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--hf-out", type=Path, default=HF_OUT)
    args = ap.parse_args(argv)
    rows = carry(args.csv, args.out, args.hf_out)
    distinct = sum(1 for r in rows if not r["duplicate_of"])
    print(f"{len(rows)} disagg rows ({distinct} distinct measurements) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
