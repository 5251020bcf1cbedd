"""Error bands (tuner.perf.bands): where they come from, how they widen off the calibrated grid,
what the shipped validation file holds, and the banded operating point of the capacity search."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner import catalog
from tuner.calibration_schema import Calibration, CalibrationGrid, Residual
from tuner.perf.bands import (
    QUANTITIES,
    GridPoint,
    ValidationBands,
    band_for,
    meets_banded,
    validation_bands,
    widening,
)
from tuner.perf.capacity import find_capacity, sim_capacity
from tuner.specs import SLA, Context, EngineConfig, GPUProfile, Metrics, Percentiles, Workload

ROOT = Path(__file__).resolve().parents[1]
GRID = CalibrationGrid(batch=(1, 16), context=(256, 4096), chunk=(256, 2048))
INSIDE = GridPoint(batch=8, context=1280, chunk=1024)


def _calibrated(residuals: dict[str, float], grid: CalibrationGrid = GRID) -> GPUProfile:
    cal = Calibration(
        backend="torch", model="llama-3.1-8b", measured_at="2026-12-03T00:00:00Z", host="test",
        efficiency={}, grid=grid,
        residuals={k: Residual(median_abs_rel_error=v / 2, p90_abs_rel_error=v, count=20)
                   for k, v in residuals.items()},
    )  # fmt: skip
    return catalog.load_gpu("h200-sxm").model_copy(update={"calibration": cal})


def test_uncalibrated_band_is_the_shipped_validation_p90() -> None:
    band = band_for(catalog.load_gpu("h200-sxm"), INSIDE)
    shipped = validation_bands().quantities
    assert band.source == "validation" and band.widening == 1
    for q in QUANTITIES:
        assert getattr(band, q) == shipped[q].p90_abs_rel_error
    assert band.text() == "band: public validation rows (p90 error)"


def test_calibrated_band_inside_the_grid_is_its_residuals() -> None:
    band = band_for(_calibrated({"ttft": 0.12, "tpot": 0.05}), INSIDE)
    assert band.source == "calibration" and band.widening == 1 and band.outside == []
    assert (band.ttft, band.tpot, band.throughput, band.e2e) == (0.12, 0.05, 0.05, 0.12)


def test_a_missing_residual_falls_back_to_step_kind_then_validation() -> None:
    band = band_for(_calibrated({"prefill_step": 0.2}), INSIDE)
    assert band.ttft == 0.2
    assert band.tpot == validation_bands().quantities["tpot"].p90_abs_rel_error


def test_bands_widen_beyond_the_calibrated_grid() -> None:
    profile = _calibrated({"ttft": 0.1, "tpot": 0.1})
    inside = band_for(profile, INSIDE)
    twice = band_for(profile, INSIDE._replace(batch=32))  # 2x past the grid's 16
    both = band_for(profile, INSIDE._replace(batch=32, context=16384))  # and 4x past 4096
    assert twice.widening == pytest.approx(2.0) and twice.tpot == pytest.approx(0.2)
    assert both.widening == pytest.approx(2.0 * 3.0) and both.ttft == pytest.approx(0.6)
    assert inside.tpot < twice.tpot < both.tpot
    assert "batch 32 outside calibrated 1-16" in twice.text() and "2.0x widened" in twice.text()
    below = band_for(profile, INSIDE._replace(chunk=64))  # 4x below the grid's 256
    assert below.widening == pytest.approx(3.0)


_dims = st.sampled_from(GridPoint._fields)
_values = st.floats(min_value=1, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(low=st.integers(1, 1000), span=st.integers(0, 1000), dim=_dims, a=_values, b=_values)
def test_widening_is_monotone_away_from_the_grid(
    low: int, span: int, dim: str, a: float, b: float
) -> None:
    """Further outside (either side) never narrows the band; inside, no widening."""
    grid = CalibrationGrid(batch=(low, low + span), context=(low, low + span),
                           chunk=(low, low + span))  # fmt: skip
    base = GridPoint(batch=low, context=low, chunk=low)
    near, far = sorted((a, b), key=lambda v: max(v / (low + span), low / v))
    f_near, _ = widening(grid, base._replace(**{dim: near}))
    f_far, _ = widening(grid, base._replace(**{dim: far}))
    assert 1.0 <= f_near <= f_far
    if low <= near <= low + span:
        assert f_near == 1.0


def test_shipped_validation_file_schema_and_counts() -> None:
    """The file parses, names its command, and counts no more rows than the CSVs hold."""
    doc = ValidationBands.model_validate_json(
        (ROOT / "tuner/data/validation_bands.json").read_text()
    )
    assert doc.command == "python benchmarks/accuracy.py --write-bands"
    assert set(doc.quantities) == set(QUANTITIES)
    with (ROOT / "benchmarks/data/silicon_public.csv").open() as fh:
        silicon_rows = sum(1 for _ in csv.DictReader(fh))
    with (ROOT / "benchmarks/data/public.csv").open() as fh:
        public = [r["metric"] for r in csv.DictReader(fh)]
    assert doc.quantities["throughput"].rows <= public.count("output_tok_s_per_gpu")
    assert doc.quantities["ttft"].rows <= silicon_rows + public.count("ttft_ms")
    for q in doc.quantities.values():
        assert q.median_abs_rel_error <= q.p90_abs_rel_error


def test_write_bands_computes_the_shipped_figures_on_a_subset(tmp_path: Path) -> None:
    """accuracy.py --write-bands on a few rows: the file it writes is the shipped schema, and
    its counts are those rows (the full run takes minutes; the shipped file is that run's)."""
    subsets = {}
    for name, keep in (("public.csv", ("GT001", "GT002")), ("silicon_public.csv", None)):
        with (ROOT / "benchmarks/data" / name).open() as fh:
            reader = csv.DictReader(fh)
            rows = [r for r in reader if keep is None or r["id"] in keep]
        rows = rows if keep else [r for r in rows if r["gemm_quant_mode"] != "nvfp4"][:3]
        path = tmp_path / name
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        subsets[name] = path
    out = tmp_path / "bands.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/accuracy.py"), "--csv",
                    str(subsets["public.csv"]), "--silicon-csv", str(subsets["silicon_public.csv"]),
                    "--write-bands", str(out)], check=True, capture_output=True)  # fmt: skip
    doc = ValidationBands.model_validate_json(out.read_text())
    assert doc.quantities["throughput"].rows == 2
    assert doc.quantities["ttft"].rows == doc.quantities["e2e"].rows == 3
    assert (
        json.loads(out.read_text()).keys()
        == json.loads((ROOT / "tuner/data/validation_bands.json").read_text()).keys()
    )


def _metrics(ttft: float, tpot: float) -> Metrics:
    return Metrics(feasible=True, backend="sim", ttft_ms=Percentiles(p95=ttft),
                   tpot_ms=Percentiles(p95=tpot), requests_per_s=1.0)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    base=st.floats(1, 40), slope=st.floats(0.1, 20), curve=st.floats(1, 3),
    b_ttft=st.floats(0, 2), b_tpot=st.floats(0, 2),
)  # fmt: skip
def test_the_band_never_raises_the_operating_load(
    base: float, slope: float, curve: float, b_ttft: float, b_tpot: float
) -> None:
    """With latencies rising with load, the banded operating point is at or below the
    unbanded one, and it keeps every bound with the latencies inflated by the band."""
    sla = SLA(name="t", ttft_ms=500, tpot_ms=50, percentile=95)
    band = band_for(catalog.load_gpu("h200-sxm")).model_copy(update={"ttft": b_ttft,
                                                                     "tpot": b_tpot})  # fmt: skip

    def probe(load: float) -> Metrics:
        return _metrics(10 * (base + slope * load**curve), base + slope * load**curve)

    plain, _ = find_capacity(probe, sla, mode="rate", low=0.01, high=100.0)
    banded, _ = find_capacity(probe, sla, mode="rate", low=0.01, high=100.0,
                              band=lambda m: band)  # fmt: skip
    assert plain.at_sla is not None and banded.at_sla is not None
    assert banded.at_sla.load == plain.at_sla.load  # the capacity itself is unchanged
    if banded.operating is None:
        return
    assert plain.operating is not None and banded.operating.load <= plain.operating.load
    op = probe(banded.operating.load)
    assert meets_banded(op, sla, band)


def test_sim_capacity_operating_point_keeps_the_sla_with_a_wide_band() -> None:
    """A calibrated profile with wide residuals moves the recommended load down, not the
    capacity; the operating point's latencies x (1 + band) meet the SLA."""
    ctx = Context(model=catalog.load_model("llama-3.1-8b"), gpu=catalog.load_gpu("h200-sxm"),
                  sla=catalog.load_sla("code"), workload=Workload())  # fmt: skip
    config = EngineConfig()
    plain, _ = sim_capacity(config, ctx)
    wide = ctx.model_copy(update={"gpu": _calibrated({"ttft": 0.6, "tpot": 0.6})})
    banded, _ = sim_capacity(config, wide)
    assert plain.operating is not None and banded.operating is not None
    assert banded.at_sla is not None and plain.at_sla is not None
    assert banded.at_sla.load == plain.at_sla.load
    assert banded.operating.load < plain.operating.load
    op = banded.operating
    assert op.band is not None and op.band.source == "calibration"
    assert op.ttft_ms.at(95) * (1 + op.band.ttft) <= 200
    assert op.tpot_ms.at(95) * (1 + op.band.tpot) <= 30


def test_predict_prints_value_pm_band_and_its_source(tmp_path: Path) -> None:
    """Uncalibrated: the validation band; a calibrated YAML profile whose grid the workload
    leaves: its residuals, widened, with the reason; --json carries the band fields."""
    from typer.testing import CliRunner

    from tuner.cli import app

    base = ["predict", "--model", "llama-3.1-8b", "--isl", "512", "--osl", "64",
            "--concurrency", "8", "--num-requests", "32"]  # fmt: skip
    result = CliRunner().invoke(app, [*base, "--gpu", "h200-sxm"])
    assert result.exit_code == 0, result.output
    ttft = round(100 * validation_bands().quantities["ttft"].p90_abs_rel_error, 1)  # as stored
    assert f"+- {ttft:.0f}%" in result.output
    assert "band: public validation rows (p90 error)" in result.output
    assert "capacity meeting the SLA:" in result.output and "per GPU +- " in result.output
    grid = CalibrationGrid(batch=(1, 4), context=(128, 256), chunk=(64, 512))
    profile = _calibrated({"ttft": 0.1, "tpot": 0.05}, grid)
    path = tmp_path / "calibrated.yaml"
    path.write_text(yaml.safe_dump(profile.model_dump(mode="json")))
    result = CliRunner().invoke(app, [*base, "--gpu", str(path)])
    assert result.exit_code == 0, result.output
    assert "band: calibration residuals (p90 error)" in result.output
    # 8 closed-loop users keep about 6.5 sequences running (Little's law), past the grid's 4
    assert re.search(r"x widened: batch 6\.\d outside calibrated 1-4", result.output)
    assert "context 576 outside calibrated 128-256" in result.output
    result = CliRunner().invoke(app, [*base, "--gpu", str(path), "--json"])
    extra = json.loads(result.stdout)["extra"]
    context_factor = 1 + math.log2(576 / 256)
    assert extra["band_widening"] > context_factor * (1 + math.log2(6 / 4))
    assert extra["tpot_band_pct"] == pytest.approx(5 * extra["band_widening"], abs=0.1)
    assert extra["band_source"].startswith("calibration residuals")


def test_fixed_load_recommendation_prefers_the_variant_that_keeps_its_band() -> None:
    """Fixed-load mode: a faster variant whose TPOT x (1 + band) exceeds the bound loses the
    headroom tier to a slower one that keeps it; without bands the faster one wins."""
    from tuner.search.pareto import _recommend
    from tuner.search.trials import TrialRecord

    sla = SLA(name="t", ttft_ms=500, tpot_ms=50, percentile=95)

    def record(n: int, tpot: float, tput: float, band: float | None) -> TrialRecord:
        m = _metrics(100.0, tpot).model_copy(update={"output_tokens_per_s_per_gpu": tput})
        if band is not None:
            m.extra.update({"ttft_band_pct": band, "tpot_band_pct": band})
        return TrialRecord(number=n, state="complete", params={}, config=EngineConfig(), metrics=m)

    fast, slow = record(0, 40.0, 2000.0, 30.0), record(1, 30.0, 1500.0, 30.0)  # 40 x 1.3 > 50
    assert _recommend([fast, slow], sla) == (1, True)
    assert _recommend([record(0, 40.0, 2000.0, None), slow], sla) == (0, True)
