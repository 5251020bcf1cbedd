"""best.yaml, plan.yaml and confirm.yaml: written from one model each and read back through it.

tests/data/result_files_v0/ holds files written by the tuner before `schema_version` existed
(captured from a 10-trial capacity tune, a fixed-load tune, a tune where nothing met the SLA,
a screened tune with the closed-form measuring backend, and a two-kind plan); they must load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.errors import InputError
from tuner.plan.plan_file import PLAN_SCHEMA_VERSION, load_plan
from tuner.result_io import dump_result
from tuner.run.best_file import (
    BEST_SCHEMA_VERSION,
    LoadPointBlock,
    ScreenedBest,
    TunedBest,
    load_best,
)
from tuner.run.folder import best_file
from tuner.run_spec import build_run_spec
from tuner.screen.confirm_file import CONFIRM_SCHEMA_VERSION, load_confirm
from tuner.search.pareto import analyze
from tuner.search.trials import TrialRecord
from tuner.specs import Engine, EngineConfig, Metrics, Percentiles

V0 = Path(__file__).parent / "data" / "result_files_v0"


def _v0(name: str) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((V0 / name).read_text())
    return data


def _with_later_knobs(value: object, key: str = "") -> object:
    """`value` with what loading gives the knobs registered after version 0 was written: each
    variant's `engine` at its default (vLLM, the one engine an older tuner modelled), a search
    space's default choices (vLLM: a space that names no engine keeps it), a plan request's
    engine (vLLM), each variant's `moe_kernel` and a space's choices of it (the engine's
    default kernels), and a GPU profile's `compute_capability` (not recorded)."""
    if isinstance(value, list):
        return [_with_later_knobs(v, key) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _with_later_knobs(v, k) for k, v in value.items()}
    later = {
        "config": Engine.vllm.value,
        "request": Engine.vllm.value,
        "space": [Engine.vllm.value],
    }
    if key in later:
        out.setdefault("engine", later[key])
    if key in ("config", "space"):
        out.setdefault("moe_kernel", "auto" if key == "config" else ["auto"])
    if key in ("gpu", "gpus") and "architecture" in out:
        out.setdefault("compute_capability", None)
    return out


def _v0_loaded(name: str) -> dict[str, object]:
    """A version-0 file's content as loading it gives it (the later knobs at their defaults)."""
    data = _with_later_knobs(_v0(name))
    assert isinstance(data, dict)
    return data


def _without_empty(value: object) -> object:
    """`value` with empty-string leaves as None (version 0 wrote absent bands as '')."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return None if value == "" else value


@pytest.mark.parametrize(
    "name", ["best_capacity.yaml", "best_fixed.yaml", "best_none.yaml", "best_screened.yaml"]
)
def test_pre_versioned_best_yaml_loads_and_rewrites_to_the_same_content(name: str) -> None:
    best = load_best(V0 / name)
    rewritten = yaml.safe_load(dump_result(best))
    assert rewritten.pop("schema_version") == BEST_SCHEMA_VERSION
    assert rewritten == _with_later_knobs(_without_empty(_v0(name)))


def test_the_two_kinds_of_best_yaml_are_told_apart_by_mode() -> None:
    tuned, screened = load_best(V0 / "best_capacity.yaml"), load_best(V0 / "best_screened.yaml")
    assert isinstance(tuned, TunedBest) and isinstance(screened, ScreenedBest)
    assert tuned.recommended is not None and tuned.recommended.capacity is not None
    assert tuned.recommended.capacity.ttft_ms == pytest.approx(121.7046398058342)
    assert screened.recommended is not None and screened.recommended.capacity is not None
    # Version 0 wrote a missing band as ''; it loads as None and is written as null.
    assert screened.recommended.capacity.ttft_band_pct is None
    assert screened.baseline.role == "baseline" and screened.gain_over_defaults == 0.0
    nothing = load_best(V0 / "best_none.yaml")
    assert isinstance(nothing, TunedBest) and nothing.recommended is None
    assert nothing.closest and nothing.closest[0].text.startswith("TTFT P95")


def test_latency_keys_name_the_sla_percentile() -> None:
    block = LoadPointBlock(
        percentile=99,
        load=2.0,
        requests_per_s_per_gpu=2.0,
        output_tokens_per_s_per_gpu=400.0,
        ttft_ms=80.0,
        tpot_ms=9.0,
    )
    data = block.model_dump(mode="json")
    assert data["ttft_p99_ms"] == 80.0 and data["tpot_p99_ms"] == 9.0
    assert "ttft_ms" not in data and "percentile" not in data
    assert LoadPointBlock.model_validate(data) == block


def _p(v: float) -> Percentiles:
    return Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v)


def _rec(n: int, ttft: float, tpot: float, tput: float) -> TrialRecord:
    m = Metrics(ttft_ms=_p(ttft), tpot_ms=_p(tpot), output_tokens_per_s_per_gpu=tput)
    return TrialRecord(number=n, state="complete", params={}, config=EngineConfig(), metrics=m)


def test_a_fixed_load_best_yaml_round_trips_without_a_capacity_block(tmp_path: Path) -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", sla="chat", percentile=90)
    sla = spec.sla
    records = [_rec(0, 300, 40, 7000), _rec(1, 600, 20, 12000)]
    result = analyze(records, sla)
    best = best_file(spec, records, result)
    path = tmp_path / "best.yaml"
    path.write_text(dump_result(best))
    raw = yaml.safe_load(path.read_text())
    assert list(raw)[0] == "schema_version" and raw["recommended"]["ttft_p90_ms"] == 300
    assert "capacity" not in raw["recommended"] and "exports" not in raw
    assert load_best(path) == best


def test_plan_and_confirm_yaml_of_version_0_load_and_rewrite_unchanged() -> None:
    plan = load_plan(V0 / "plan.yaml")
    assert plan.schema_version == PLAN_SCHEMA_VERSION and plan.cheapest == "h100-sxm"
    assert yaml.safe_load(dump_result(plan)) == {
        "schema_version": PLAN_SCHEMA_VERSION,
        **_v0_loaded("plan.yaml"),
    }
    confirm = load_confirm(V0 / "confirm.yaml")
    assert [v.role for v in confirm.variants] == ["baseline", "candidate"]
    assert not any(v.restored for v in confirm.variants)  # bookkeeping, never in the file
    assert yaml.safe_load(dump_result(confirm)) == {
        "schema_version": CONFIRM_SCHEMA_VERSION,
        **_v0_loaded("confirm.yaml"),
    }


def test_a_file_from_a_newer_tuner_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump({**_v0("best_fixed.yaml"), "schema_version": 99}))
    with pytest.raises(
        InputError, match=r"schema_version 99 is not one this tuner reads \(0 to 1\)"
    ):
        load_best(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("mode: capacity\nsla: {}\n", "not a valid best.yaml (rule: Field required)"),
        ("- a list\n", "expected a mapping"),
        ("mode: [unclosed\n", "not a YAML best.yaml"),
        ("mode: sideways\n", "does not match any of the expected tags"),
    ],
)
def test_a_broken_best_yaml_is_one_clear_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_best(path)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_key_is_refused_with_its_place(tmp_path: Path) -> None:
    data = _v0("best_capacity.yaml")
    rec = data["recommended"]
    assert isinstance(rec, dict)
    rec["capacity"]["lode"] = 3
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"\(recommended\.capacity\.lode: Extra inputs"):
        load_best(path)
