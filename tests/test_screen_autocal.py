"""Calibrate before screening (issue 34, item 1): a screened tune on vLLM screens with a vLLM
calibration of this host: the one given, else a stored one (its age and source said), else a
quick one run first and stored; other backends are left alone. The calibration is a stand-in."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from tuner.backends.vllm import VLLMBackend
from tuner.backends.vllm_platform import build_name
from tuner.calibration_schema import Calibration, CalibrationGrid, Residual
from tuner.run_spec import build_run_spec
from tuner.screen.autocal import (
    PROFILE_DIR_ENV,
    profile_age,
    screen_profile,
    stored_profile_path,
)
from tuner.specs import GPUProfile

pytestmark = pytest.mark.unit


def _calibrated(gpu: GPUProfile, model: str, backend: str = "vllm", users: int = 16) -> GPUProfile:
    cal = Calibration(
        backend=backend,  # type: ignore[arg-type]
        model=model,
        measured_at="2026-01-01T00:00:00+00:00",
        host="test host",
        efficiency={"step_overhead_s": 0.004},
        residuals={"ttft": Residual(median_abs_rel_error=0.1, p90_abs_rel_error=0.2, count=2)},
        grid=CalibrationGrid(batch=(1, users), context=(32, 512), chunk=(32, 512)),
    )
    return gpu.model_copy(update={"calibration": cal, "name": "cpu-calibrated"})


class _Calibrate:
    """Counts calls; returns the run's profile with a vLLM calibration."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model: Any, **kw: Any) -> Any:
        self.calls += 1
        assert isinstance(kw["backend"], VLLMBackend)

        class Done:
            profile = _calibrated(SPEC.gpu, model.name)

        return Done()


SPEC = build_run_spec(model="smollm2-135m", gpu="h200-sxm", sla="chat", backend="sim")


@pytest.fixture()
def vllm_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VLLMBackend:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "profiles"))
    return VLLMBackend(python="/bin/false", run_dir=tmp_path / "logs")  # never started here


def test_first_run_calibrates_and_stores_the_second_reuses(vllm_backend: VLLMBackend) -> None:
    calibrate = _Calibrate()
    spec, note = screen_profile(SPEC, vllm_backend, calibrate=calibrate)
    assert calibrate.calls == 1 and spec.gpu.calibration is not None
    assert note is not None and "calibrated now" in note
    stored = stored_profile_path("smollm2-135m", build_name(vllm_backend.cpu_build))
    assert stored.is_file() and stored.parent.name == "profiles"  # under TUNER_PROFILE_DIR
    again, note = screen_profile(SPEC, vllm_backend, calibrate=calibrate)
    assert calibrate.calls == 1  # reused, not measured again
    assert again.gpu == spec.gpu
    assert note is not None and note.startswith("screen profile: stored ") and "old" in note


def test_a_given_vllm_calibration_is_used_as_is(vllm_backend: VLLMBackend) -> None:
    calibrate = _Calibrate()
    given = SPEC.model_copy(update={"gpu": _calibrated(SPEC.gpu, "smollm2-135m")})
    spec, note = screen_profile(given, vllm_backend, calibrate=calibrate)
    assert calibrate.calls == 0 and spec is given and note and "given" in note


def test_a_stored_profile_of_another_model_is_not_reused(vllm_backend: VLLMBackend) -> None:
    calibrate = _Calibrate()
    screen_profile(SPEC, vllm_backend, calibrate=calibrate)
    other = build_run_spec(model="qwen2.5-0.5b", gpu="h200-sxm", sla="chat", backend="sim")
    screen_profile(other, vllm_backend, calibrate=calibrate)
    assert calibrate.calls == 2


def test_other_backends_are_left_alone() -> None:
    assert screen_profile(SPEC, object(), calibrate=_Calibrate()) == (SPEC, None)


def test_a_failed_calibration_screens_uncalibrated_and_says_so(vllm_backend: VLLMBackend) -> None:
    from tuner.errors import BackendError

    def broken(model: Any, **kw: Any) -> Any:
        raise BackendError("vLLM calibration: every run failed (no server)")

    spec, note = screen_profile(SPEC, vllm_backend, calibrate=broken)
    assert spec is SPEC and note is not None and "calibration failed" in note


def test_profile_age_says_how_old_and_where() -> None:
    gpu = _calibrated(SPEC.gpu, "smollm2-135m")
    now = dt.datetime(2026, 1, 11, tzinfo=dt.UTC)
    assert profile_age(gpu, now) == (
        "vllm calibration of smollm2-135m, 10 days old (2026-01-01T00:00:00+00:00, test host)"
    )
    assert profile_age(SPEC.gpu) == "not calibrated"


def test_a_stored_profile_that_never_saw_16_users_is_calibrated_again(
    vllm_backend: VLLMBackend,
) -> None:
    # Fitted on 1 and 4 users it predicted vLLM-CPU's capacity 60% too high (issue 34).
    from tuner.calibrate.profile import write_profile

    stored = stored_profile_path("smollm2-135m", build_name(vllm_backend.cpu_build))
    write_profile(_calibrated(SPEC.gpu, "smollm2-135m", users=4), stored)
    calibrate, said = _Calibrate(), list[str]()
    spec, note = screen_profile(SPEC, vllm_backend, calibrate=calibrate, progress=said.append)
    assert calibrate.calls == 1 and note is not None and "calibrated now" in note
    assert spec.gpu.calibration is not None and spec.gpu.calibration.grid.batch == (1, 16)
    assert said == [
        f"the stored calibration {stored} saw at most 4 users, not 16: calibrating first"
    ]
