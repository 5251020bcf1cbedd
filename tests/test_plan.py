"""`tuner plan`: sizing invariants, prices, memory fit, the planner and the CLI contract."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tuner import catalog
from tuner.cli import app
from tuner.errors import InputError
from tuner.plan import PlanRequest, PlanResult, PriceTable, load_prices, plan
from tuner.plan.fit import check_fit, fit_note, tp_sizes
from tuner.plan.models import KindPlan
from tuner.plan.plan_file import load_plan
from tuner.plan.planner import rank_kinds, size_option
from tuner.plan.search import CapacityChoice, knob_grid
from tuner.plan.sizing import (
    energy_j_per_token,
    offered_rate_rps,
    replicas_needed,
    usd_per_million_tokens,
    utilisation,
)
from tuner.prices import GPUPrice
from tuner.specs import EngineConfig, IntRange, KVDtype, Quantization, Workload

pytestmark = pytest.mark.unit

runner = CliRunner()
SMALL = Workload(input_tokens=256, output_tokens=64, num_requests=40)
KINDS = ["l40s", "h100-sxm"]


def _request(**update: object) -> PlanRequest:
    fields: dict[str, object] = {
        "model": catalog.load_model("llama-3.2-1b"), "sla": catalog.load_sla("chat"),
        "workload": SMALL, "space": catalog.load_search_space("default"), "rate_rps": 20.0,
        "gpus": KINDS,
    }  # fmt: skip
    merged = {**fields, **update}
    merged["gpus"] = [catalog.load_gpu(g) for g in merged["gpus"]]  # type: ignore[attr-defined]
    return PlanRequest(**merged)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small_plan() -> PlanResult:
    """One real (simulated) plan of a small model on two kinds, shared by the invariant tests."""
    return plan(_request(), load_prices())


def _choice(kind: KindPlan) -> CapacityChoice:
    assert kind.best is not None
    return CapacityChoice(kind.best.config, kind.best.capacity_rps_per_replica, 0)


# ----------------------------------------------------------------------------- arithmetic


@given(
    st.floats(0.0, 1e4), st.floats(0.0, 1e4), st.floats(0.01, 1e3), st.floats(0.0, 1.0)
)  # fmt: skip
def test_more_load_never_needs_fewer_replicas(a: float, b: float, cap: float, head: float) -> None:
    lo, hi = sorted((a, b))
    assert replicas_needed(lo, cap, head) <= replicas_needed(hi, cap, head)


@given(st.floats(0.01, 1e4), st.floats(0.01, 1e3), st.floats(0.0, 1.0))
@example(0.01171875, 0.01171875, 1e-9)
@example(1.0, 1.0, 1e-9)
def test_replicas_leave_the_stated_headroom(target: float, cap: float, head: float) -> None:
    n = replicas_needed(target, cap, head)
    # replicas_needed forgives float noise of up to 1e-9 replica (an exact multiple must not add
    # one), so the headroom holds to that tolerance, not exactly (head=1e-9 found the gap).
    ratio = target * (1 + head) / cap
    assert n >= ratio - 2e-9
    assert n == 1 or n - 1 < ratio
    assert utilisation(target, n, cap) <= (1 + 2e-9) / (1 + head)


def test_cost_and_energy_arithmetic() -> None:
    # 4 GPUs at $2/h serving 1000 tok/s: $8/h over 3.6M tokens per hour.
    assert usd_per_million_tokens(8.0, 1000.0) == pytest.approx(8.0 / 3.6)
    assert energy_j_per_token(4, 700.0, 0.5, 1000.0) == pytest.approx(1.4)
    assert energy_j_per_token(4, 0.0, 0.5, 1000.0) is None  # unknown TDP: no estimate
    assert offered_rate_rps(100, 9.0, 1.0) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        replicas_needed(1.0, 0.0, 0.2)


def test_knob_grid_takes_powers_of_two_inside_a_range() -> None:
    assert knob_grid(IntRange(low=512, high=16384, step=512)) == [
        512,
        1024,
        2048,
        4096,
        8192,
        16384,
    ]
    assert knob_grid(IntRange(low=1, high=512, log=True))[-1] == 512
    assert knob_grid([64, 8, 8]) == [8, 64]


# ----------------------------------------------------------------------------- prices


def test_shipped_prices_are_cited_dated_and_name_real_profiles() -> None:
    table = load_prices()
    profiles = set(catalog.list_names("hardware_profiles"))
    assert table.prices and set(table.prices) <= profiles
    for price in table.prices.values():
        assert price.source.startswith("https://")
        assert price.checked <= dt.date.today()


def test_price_file_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("prices:\n  h100-sxm: {usd_per_gpu_hour: -1}\n")
    with pytest.raises(InputError, match="usd_per_gpu_hour"):
        load_prices(bad)
    bad.write_text("prices:\n  h100-sx: {usd_per_gpu_hour: 1, provider: x, "
                   "source: https://x.example, checked: 2026-01-01}\n")  # fmt: skip
    with pytest.raises(InputError, match="unknown GPU profile"):
        load_prices(bad)
    with pytest.raises(InputError, match="no such file"):
        load_prices(tmp_path / "missing.yaml")


# ----------------------------------------------------------------------------- memory fit


def test_small_card_fit_names_the_quantization_that_fits() -> None:
    model, gpu = catalog.load_model("qwen2.5-14b"), catalog.load_gpu("rtx-4090")
    wl = Workload(input_tokens=1024, output_tokens=256)
    sixteen = {"quantization": Quantization.bf16, "kv_dtype": KVDtype.auto}
    eight = {"quantization": Quantization.int8, "kv_dtype": KVDtype.fp8}
    bf16 = check_fit(model, gpu, wl, sixteen, 1, min_batched_tokens=512)
    int8 = check_fit(model, gpu, wl, eight, 1, min_batched_tokens=512)
    assert not bf16.fits and int8.fits
    chosen = EngineConfig(quantization=Quantization.int8, kv_dtype=KVDtype.fp8)
    note = fit_note(model, gpu, chosen, bf16, int8.plan, 3.1)
    assert "16-bit does not fit 1x rtx-4090" in note
    assert "int8 weights and fp8 KV" in note and "3.10 req/s" in note


def test_model_too_big_at_any_quantization_is_listed_as_not_fitting_with_the_reason() -> None:
    req = _request(model=catalog.load_model("llama-3.1-405b"), gpus=["rtx-4090", "l40s"],
                   max_gpus_per_replica=2)  # fmt: skip
    result = plan(req, load_prices())
    assert [k.status for k in result.kinds] == ["no-fit", "no-fit"]
    for kind in result.kinds:
        assert kind.reason and "does not fit at any quantization" in kind.reason
        assert "int4" in kind.reason and "GiB" in kind.reason
    assert result.cheapest is None and not result.ok


def test_tp_sizes_divide_the_heads() -> None:
    model = catalog.load_model("llama-3.1-8b")  # 32 heads
    assert tp_sizes(model, 8) == [1, 2, 4, 8]
    assert tp_sizes(model, 3) == [1, 2]


# ----------------------------------------------------------------------------- planner


def test_plan_ranks_cheapest_first_and_prices_every_option(small_plan: PlanResult) -> None:
    assert [k.status for k in small_plan.kinds] == ["ok", "ok"]
    costs = [k.best.usd_per_hour for k in small_plan.kinds if k.best]
    assert costs == sorted(costs)  # type: ignore[type-var]
    assert small_plan.cheapest == small_plan.kinds[0].gpu
    for kind in small_plan.kinds:
        o = kind.best
        assert o is not None and o.gpus == o.replicas * o.tp
        assert o.ttft_ms <= small_plan.request.sla.ttft_ms  # type: ignore[operator]
        assert o.tpot_ms <= small_plan.request.sla.tpot_ms  # type: ignore[operator]
        assert 0 < o.utilisation <= 1


@settings(max_examples=15, deadline=None)
@given(st.floats(0.5, 200.0), st.floats(0.5, 200.0))
def test_more_load_never_needs_fewer_gpus_at_planned_capacity(
    small_plan: PlanResult, a: float, b: float
) -> None:
    lo, hi = sorted((a, b))
    kind = small_plan.kinds[0]
    gpu, price = catalog.load_gpu(kind.gpu), kind.price
    small = size_option(_request(rate_rps=lo), gpu, _choice(kind), price, "", 0)
    big = size_option(_request(rate_rps=hi), gpu, _choice(kind), price, "", 0)
    assert small.gpus <= big.gpus


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05, 20.0), st.floats(1.0, 10.0), st.integers(0, 1))
def test_a_higher_price_never_makes_a_gpu_kind_cheaper(
    small_plan: PlanResult, price: float, factor: float, which: int
) -> None:
    req = small_plan.request

    def repriced(kind: KindPlan, usd: float) -> KindPlan:
        assert kind.price is not None
        p = kind.price.model_copy(update={"usd_per_gpu_hour": usd})
        gpu = catalog.load_gpu(kind.gpu)
        best = size_option(req, gpu, _choice(kind), p, "", 0)
        return kind.model_copy(update={"price": p, "best": best, "options": [best]})

    target = small_plan.kinds[which]
    others = [k for k in small_plan.kinds if k is not target]
    cheap, dear = repriced(target, price), repriced(target, price * factor)
    assert cheap.best and dear.best
    assert dear.best.usd_per_hour >= cheap.best.usd_per_hour  # type: ignore[operator]
    assert dear.best.usd_per_m_output_tokens >= cheap.best.usd_per_m_output_tokens  # type: ignore[operator]
    rank_cheap = [k.gpu for k in rank_kinds([cheap, *others])].index(target.gpu)
    rank_dear = [k.gpu for k in rank_kinds([dear, *others])].index(target.gpu)
    assert rank_dear >= rank_cheap


def test_every_option_carries_its_capacity_band_and_the_fleet_at_its_low_edge(
    small_plan: PlanResult,
) -> None:
    for kind in small_plan.kinds:
        o = kind.best
        assert o is not None and 0 < o.capacity_band < 1 and "validation" in o.band_source
        low = o.capacity_rps_per_replica * (1 - o.capacity_band)
        assert o.replicas_at_band == replicas_needed(o.target_rps, low, small_plan.request.headroom)
        assert o.replicas_at_band >= o.replicas


def test_missing_prices_are_reported_never_invented(small_plan: PlanResult) -> None:
    result = plan(_request(gpus=["l40s"]), PriceTable())
    assert result.missing_prices == ["l40s"] and result.cheapest is None
    best = result.kinds[0].best
    assert best is not None and best.usd_per_hour is None and best.usd_per_m_output_tokens is None


def test_users_are_turned_into_a_rate_with_littles_law() -> None:
    result = plan(_request(rate_rps=None, users=50, think_time_s=5.0, gpus=["l40s"]), load_prices())
    best = result.kinds[0].best
    assert best is not None
    assert 50 / 6.0 < best.target_rps < 50 / 5.0  # E2E of a 64-token answer is under a second


# ----------------------------------------------------------------------------- CLI


def test_cli_prints_the_ranked_table_and_writes_the_run_folder(tmp_path: Path) -> None:
    res = runner.invoke(app, ["plan", "--model", "llama-3.2-1b", "--rate", "20", "--gpus",
                              ",".join(KINDS), "--isl", "256", "--osl", "64", "--num-requests",
                              "40", "--run-dir", str(tmp_path / "run")])  # fmt: skip
    assert res.exit_code == 0, res.output
    for gpu in KINDS:
        assert gpu in res.stdout
        assert (tmp_path / "run" / "exports" / gpu / "vllm.sh").is_file()
    assert "cheapest meeting the SLA" in res.stdout and "$/1M out" in res.stdout
    text = " ".join(res.stdout.split())  # lines wrap at the terminal's width
    assert "at the band's low edge" in text and "capacity band: public validation" in text
    rows = (tmp_path / "run" / "plan.csv").read_text().splitlines()
    assert rows[0].startswith("rank,gpu,status") and len(rows) >= 3
    assert "Plotly.newPlot" in (tmp_path / "run" / "plan.html").read_text()
    plan = load_plan(tmp_path / "run" / "plan.yaml")
    assert plan.schema_version == 1 and {k.gpu for k in plan.kinds} == set(KINDS)


def test_cli_json_is_one_object(tmp_path: Path) -> None:
    res = runner.invoke(app, ["plan", "--model", "llama-3.2-1b", "--rate", "5", "--gpus", "l40s",
                              "--isl", "256", "--osl", "64", "--num-requests", "40", "--json",
                              "--run-dir", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    doc = json.loads(lines[0])
    assert len(lines) == 1 and doc["cheapest"] == "l40s" and doc["run_dir"] == str(tmp_path)


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--gpus", "h100-sx", "--rate", "5"], 2, "unknown GPU profile 'h100-sx'"),
        (["--gpus", "l40s"], 2, "exactly one target"),
        (["--gpus", "l40s", "--rate", "5", "--users", "3"], 2, "exactly one target"),
        (["--gpus", "l40s", "--rate", "-1"], 2, "--rate"),
        (["--gpus", "l40s", "--rate", "5", "--ttft-ms", "1"], 3, "no GPU kind meets the SLA"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], code: int, says: str) -> None:
    res = runner.invoke(app, ["plan", "--model", "llama-3.2-1b", "--num-requests", "40",
                              "--run-dir", str(tmp_path), *args])  # fmt: skip
    assert res.exit_code == code, res.output
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and says in err[0] and "Traceback" not in res.output


def test_cli_malformed_price_file_is_exit_2(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices: [oops\n")
    res = runner.invoke(app, ["plan", "--model", "llama-3.2-1b", "--rate", "5", "--gpus", "l40s",
                              "--prices", str(prices), "--run-dir", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 2 and "malformed YAML" in res.stderr


def test_gpu_price_model_rejects_a_missing_source() -> None:
    with pytest.raises(ValueError):
        GPUPrice(usd_per_gpu_hour=1.0, provider="x", source="", checked=dt.date(2026, 1, 1))


def test_table_fits_80_columns_with_every_name_whole(small_plan: PlanResult) -> None:
    from rich.console import Console

    from tuner.cli.plan_cmd import _table

    names = sorted(catalog.list_names("hardware_profiles"), key=len, reverse=True)[:3]
    kinds = [small_plan.kinds[i % 2].model_copy(update={"gpu": n}) for i, n in enumerate(names)]
    console = Console(width=80, record=True)
    console.print(_table(small_plan.model_copy(update={"kinds": kinds})))
    text = console.export_text()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    for name in names:
        assert name in text


def test_chart_data_has_a_point_per_priced_option_and_monotone_gpu_curves(
    small_plan: PlanResult,
) -> None:
    from tuner.plan.chart import chart_data, figures

    data = chart_data(small_plan)
    options = [o for k in small_plan.ok for o in k.options]
    assert len(data.cost_points) == len(options)
    for curve in data.load_curves:
        assert curve.gpus == sorted(curve.gpus) and curve.loads_rps[0] == 0.0
    figs = figures(data)
    assert {t["name"] for t in figs["cost"]["data"]} == {k.gpu for k in small_plan.ok}


def test_custom_gpu_yaml_is_planned_and_priced_from_a_user_price_file(tmp_path: Path) -> None:
    import yaml

    gpu = catalog.load_gpu("l40s").model_copy(update={"name": "my-l40s", "aliases": []})
    gpu_file = tmp_path / "my-l40s.yaml"
    gpu_file.write_text(yaml.safe_dump(gpu.model_dump(mode="json")))
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  my-l40s: {usd_per_gpu_hour: 0.5, provider: us, "
                      "source: https://example.com/quote, checked: 2026-11-30}\n")  # fmt: skip
    res = runner.invoke(app, ["plan", "--model", "llama-3.2-1b", "--rate", "5", "--gpus",
                              str(gpu_file), "--prices", str(prices), "--isl", "256", "--osl",
                              "64", "--num-requests", "40", "--json",
                              "--run-dir", str(tmp_path / "run")])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["cheapest"] == "my-l40s" and doc["kinds"][0]["best"]["usd_per_gpu_hour"] == 0.5
    assert (tmp_path / "run" / "exports" / "my-l40s" / "vllm.sh").is_file()
