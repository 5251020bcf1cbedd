"""The screened tune's flag rules and the tune command's override rules, called from Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import InputError
from tuner.run.inputs import check_overrides
from tuner.screen.options import FLAGS, ScreenOptions, checked_flags, resumed_options

NONE = {"screen": None, "confirm": None, "confirm_seconds": None, "refit": False}


def test_the_flags_are_the_options_fields() -> None:
    assert set(FLAGS) == set(ScreenOptions.model_fields)


def test_no_screen_flag_is_no_screened_tune() -> None:
    assert checked_flags(NONE, {"backend": "sim"}) is None


def test_a_screen_flag_without_screen_is_refused_unless_resuming() -> None:
    flags = {**NONE, "confirm": 0}  # 0 is still given (it equals False)
    with pytest.raises(InputError, match="--confirm needs --screen sim"):
        checked_flags(flags, {"backend": "torch"})
    with pytest.raises(InputError, match="--confirm 0: Input should be greater"):
        checked_flags(flags, {"backend": "torch", "resume": Path("r")})
    given = checked_flags({**NONE, "confirm": 5}, {"resume": Path("r")})
    assert given is not None and given.model_fields_set == {"confirm"}


def test_screen_sim_gets_the_default_k_and_needs_a_measuring_backend() -> None:
    options = checked_flags({**NONE, "screen": "sim"}, {"backend": "torch"})
    assert options == ScreenOptions(screen="sim", confirm=3, rounds=3)
    with pytest.raises(InputError, match="measures on a real backend"):
        checked_flags({**NONE, "screen": "sim"}, {"backend": "sim"})
    with pytest.raises(InputError, match="not a predictor"):
        checked_flags({**NONE, "screen": "gpu"}, {"backend": "torch"})


@pytest.mark.parametrize("other", ["resume", "config", "storage"])
def test_screen_refuses_resume_config_and_storage(other: str) -> None:
    with pytest.raises(InputError, match=f"--screen cannot be combined with --{other}"):
        checked_flags({**NONE, "screen": "sim"}, {"backend": "vllm", other: "x"})


def test_a_resume_keeps_the_saved_options_under_the_given_ones() -> None:
    saved = ScreenOptions(confirm=4, confirm_seconds=60.0, refit=True)
    given = ScreenOptions(confirm_seconds=300.0)
    assert resumed_options(saved, None) == saved
    assert resumed_options(saved, given) == ScreenOptions(
        confirm=4, confirm_seconds=300.0, refit=True
    )


def test_a_loaded_run_takes_only_its_budget_flags() -> None:
    check_overrides(["isl", "model"], resume=False, config=False)
    check_overrides(["trials", "confirm"], resume=True, config=False)
    with pytest.raises(InputError, match="--isl cannot be combined with --resume"):
        check_overrides(["trials", "isl"], resume=True, config=False)
    with pytest.raises(InputError, match="--confirm cannot be combined with --config"):
        check_overrides(["confirm"], resume=False, config=True)
