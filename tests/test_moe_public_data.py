"""benchmarks/data/moe_public.csv: public MoE silicon rows parse and stay traceable."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
MOE_CSV = DATA / "moe_public.csv"
SILICON_CSV = DATA / "silicon_public.csv"

# silicon_public.csv's columns, in its order, then the MoE columns.
BASE_COLUMNS = ["id", "backend", "backend_version", "model_path", "system", "precision", "isl",
                "osl", "gemm_quant_mode", "batch_size", "tp_size", "pp_size",
                "silicon_ttft_ms", "silicon_tpot_ms"]  # fmt: skip
MOE_COLUMNS = ["moe_quant_mode", "attention_dp_size", "moe_tp_size", "moe_ep_size",
               "silicon_data_source", "source", "protocol", "duplicate_of", "aic_layout",
               "notes"]  # fmt: skip
POSITIVE_INTS = ["isl", "osl", "batch_size", "tp_size", "pp_size", "moe_tp_size", "moe_ep_size"]
PROTOCOLS = {"aiperf", "inferencemax", "inferencemax_warmup", "unknown"}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return _rows(MOE_CSV)


def test_columns_extend_silicon_public(rows: list[dict[str, str]]) -> None:
    with MOE_CSV.open(newline="") as fh:
        header = next(csv.reader(fh))
    with SILICON_CSV.open(newline="") as fh:
        assert next(csv.reader(fh)) == BASE_COLUMNS
    assert header == BASE_COLUMNS + MOE_COLUMNS
    assert len(rows) >= 40


def test_every_row_is_sourced(rows: list[dict[str, str]]) -> None:
    for row in rows:
        assert row["source"].strip(), row["id"]
        assert row["silicon_data_source"].strip(), row["id"]
        assert row["protocol"] in PROTOCOLS, row["id"]


def test_numbers_are_positive(rows: list[dict[str, str]]) -> None:
    for row in rows:
        for key in ("silicon_ttft_ms", "silicon_tpot_ms"):
            value = float(row[key])
            assert math.isfinite(value) and value > 0, (row["id"], key)
        for key in POSITIVE_INTS:
            assert int(float(row[key])) > 0, (row["id"], key)
        if row["attention_dp_size"]:
            assert int(row["attention_dp_size"]) > 0, row["id"]


def test_layout_is_consistent(rows: list[dict[str, str]]) -> None:
    """Attention GPUs (tp x dp) equal expert GPUs (moe_tp x moe_ep) on every row."""
    for row in rows:
        dp = int(row["attention_dp_size"] or 1)
        gpus = int(row["tp_size"]) * dp
        assert gpus == int(row["moe_tp_size"]) * int(row["moe_ep_size"]), row["id"]


def test_ids_unique_and_disjoint_from_silicon_public(rows: list[dict[str, str]]) -> None:
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids))
    assert not set(ids) & {row["id"] for row in _rows(SILICON_CSV)}


def test_duplicates_point_at_kept_rows(rows: list[dict[str, str]]) -> None:
    """A `duplicate_of` row repeats another row's measurement (same TTFT, TPOT, layout)."""
    by_id = {row["id"]: row for row in rows}
    keys = ("system", "backend", "isl", "osl", "tp_size", "moe_ep_size", "protocol")
    for row in rows:
        if not row["duplicate_of"]:
            continue
        kept = by_id[row["duplicate_of"]]
        assert not kept["duplicate_of"], row["id"]
        assert [row[k] for k in keys] == [kept[k] for k in keys], row["id"]
        assert math.isclose(float(row["silicon_ttft_ms"]), float(kept["silicon_ttft_ms"]))
