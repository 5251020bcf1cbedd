"""`predict` and `tune` agree on which variants can run: both go through tuner.validity, and the
search samples exactly the values predict accepts (a hypothesis test over the shipped spaces)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tuner import catalog
from tuner.backends.sim import SimBackend
from tuner.errors import InputError
from tuner.knobs import searched
from tuner.request import build_request
from tuner.search.study import config_from_params, sampling_space
from tuner.specs import Context, IntRange, Workload
from tuner.validity import invalid_reason

pytestmark = pytest.mark.unit

GPUS = ("a100-80gb-sxm", "h200-sxm", "l4")
SPACES = ("default", "latency", "throughput")
MODELS = ("llama-3.1-8b", "llama-3.1-70b")
WORKLOAD = {"isl": 256, "osl": 32, "concurrency": 4, "num_requests": 12}


def _values(spec: Any) -> st.SearchStrategy[Any]:
    if isinstance(spec, IntRange):
        if spec.log:
            return st.integers(spec.low, spec.high)
        return st.integers(0, (spec.high - spec.low) // spec.step).map(
            lambda i: spec.low + i * spec.step
        )
    return st.sampled_from([getattr(v, "value", v) for v in spec])


@st.composite
def variants(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    space_name = draw(st.sampled_from(SPACES))
    space = catalog.load_search_space(space_name)
    values = {k.name: draw(_values(getattr(space, k.name))) for k in searched()}
    values["model"] = draw(st.sampled_from(MODELS))  # 70B does not fit one GPU: memory rule
    return draw(st.sampled_from(GPUS)), space_name, values


def _tune_view(gpu: str, space_name: str, values: dict[str, Any]) -> tuple[bool, str | None]:
    """Would the search propose this variant, and would it run (sim)?"""
    space = catalog.load_search_space(space_name)
    values = dict(values)
    model = values.pop("model")
    workload = Workload(input_tokens=256, output_tokens=32, concurrency=4, num_requests=12)
    ctx = Context(model=catalog.load_model(model), gpu=catalog.load_gpu(gpu),
                  sla=catalog.load_sla("chat"), workload=workload,
                  num_gpus=values["tensor_parallel_size"])  # fmt: skip
    try:
        sampled = sampling_space(space, ctx)
    except InputError as exc:
        return False, str(exc)
    for knob in searched():
        spec, value = sampled[knob.name], values[knob.name]
        needs_off = knob.needs and not values[knob.needs]
        if needs_off or spec is None:
            if value != knob.default:
                return False, "not sampled"
            continue
        if not isinstance(spec, IntRange) and value not in [getattr(v, "value", v) for v in spec]:
            return False, "not sampled"
    if values["draft_model"] and not values["num_speculative_tokens"]:
        return False, "not sampled"
    config = config_from_params(dict(values))
    if isinstance(config, str):
        return False, config
    reason = invalid_reason(config, ctx)
    if reason:
        return False, reason
    metrics = SimBackend().evaluate(config, ctx)
    return metrics.feasible, metrics.reason


def _predict_view(gpu: str, values: dict[str, Any]) -> tuple[bool, str | None]:
    model = values["model"]
    flags = {k: None if v is None else str(v) for k, v in values.items() if k != "model"}
    try:
        config, ctx = build_request(model=model, gpu=gpu, knob_flags=flags, **WORKLOAD)
    except InputError as exc:
        return False, str(exc)
    metrics = SimBackend().evaluate(config, ctx)
    return metrics.feasible, metrics.reason


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(variants())
def test_predict_and_tune_agree_on_feasibility(variant: tuple[str, str, dict[str, Any]]) -> None:
    gpu, space_name, values = variant
    tune_ok, tune_why = _tune_view(gpu, space_name, values)
    predict_ok, predict_why = _predict_view(gpu, values)
    event("runs" if predict_ok else f"refused: {(predict_why or '').split(' ')[0]}")
    assert tune_ok == predict_ok, (values, gpu, tune_why, predict_why)
    if tune_why not in (None, "not sampled") and not tune_why.startswith("space "):
        assert tune_why == predict_why  # one message per rule
