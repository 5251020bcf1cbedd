"""What a screened tune is asked to do: its options, how its flags mix with `tune`'s, and the
spec of its simulator screen."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tuner.detect import MEASURING_BACKENDS
from tuner.errors import InputError, echo
from tuner.perf.load import ProbeBudget
from tuner.run_spec import MEASURED_ENGINES, RunSpec

__all__ = [
    "FLAGS",
    "MAX_CONFIRM",
    "SCREENS",
    "ScreenOptions",
    "checked_flags",
    "resumed_options",
    "screen_spec",
]

# More confirmations than this is a typo: each one starts a real server for minutes.
MAX_CONFIRM = 50
SCREENS = ("sim",)
# ScreenOptions' fields, as flags
FLAGS = ("screen", "confirm", "rounds", "confirm_seconds", "refit", "no_calibrate")
DEFAULT_CONFIRM = 3
# Rounds of measurement: the first from the screen, each later one from the screen re-ranked by
# the simulator refitted to every measurement so far (`tuner.screen.rounds`).
DEFAULT_ROUNDS = 3
MAX_ROUNDS = 20


class ScreenOptions(BaseModel):
    """How a screened tune screens and measures."""

    model_config = ConfigDict(extra="forbid")

    screen: Literal["sim"] = "sim"
    confirm: int = Field(
        default=DEFAULT_CONFIRM, ge=1, le=MAX_CONFIRM, description="Variants to measure per round"
    )
    # A file without the field was written by a one-round screen; the CLI's default is
    # DEFAULT_ROUNDS (screen_options passes it explicitly).
    rounds: int = Field(
        default=1,
        exclude_if=lambda v: v == 1,  # files written before the field read back equal
        ge=1,
        le=MAX_ROUNDS,
        description="Most rounds of measurement; after each the simulator is refitted and the "
        "screen re-ranked (the loop also stops when a round did not improve the measured best)",
    )
    confirm_seconds: float | None = Field(
        default=None, gt=0, description="Measurement time budget; later variants are skipped"
    )
    refit: bool = Field(default=False, description="Refit the device profile from the results")
    no_calibrate: bool = Field(
        default=False,
        description="Screen with the --gpu profile as given (no automatic vLLM calibration)",
        exclude_if=lambda v: not v,  # files written before the field read back equal
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _options(fields: dict[str, Any]) -> ScreenOptions:
    """ScreenOptions of the given fields only (its `model_fields_set` says which were given)."""
    try:
        return ScreenOptions(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"{_flag(str(err['loc'][0]))} {err['input']}: {err['msg']}") from None


def _without_screen(flags: dict[str, Any], others: dict[str, Any]) -> ScreenOptions | None:
    """The flags given without --screen: only a resume of a screened run takes them."""
    # `is not False`, not `in (None, False)`: `--confirm 0` equals False and is still given.
    set_now = {k: v for k, v in flags.items() if v is not None and v is not False}
    if not set_now:
        return None
    if others.get("resume") is not None:
        # Checked against the run folder by `resumed_options`: only a screened run takes them.
        return _options(set_now)
    given = ", ".join(_flag(k) for k in set_now)
    raise InputError(f"{given} needs --screen sim (a screened tune)")


def checked_flags(flags: dict[str, Any], others: dict[str, Any]) -> ScreenOptions | None:
    """The screen flags (`FLAGS` -> value) as ScreenOptions, None when none is given; InputError
    when they do not mix with the tune's `others` (backend, resume, config, storage)."""
    screen = flags["screen"]
    if screen is None:
        return _without_screen(flags, others)
    if screen not in SCREENS:
        allowed = ", ".join(SCREENS)
        raise InputError(f"--screen {echo(screen)}: not a predictor; allowed: {allowed}")
    backend = others.get("backend")
    if backend not in MEASURING_BACKENDS:
        raise InputError(
            f"--screen {screen} --confirm measures on a real backend: use --backend "
            f"{' or '.join(MEASURING_BACKENDS)} (got --backend {echo(str(backend))})"
        )
    if others.get("resume") is not None:
        raise InputError(
            "--screen cannot be combined with --resume: a screened run folder "
            "remembers its flags, resume it with `tuner tune --resume RUN` alone"
        )
    for name in ("config", "storage"):
        if others.get(name) is not None:
            raise InputError(
                f"--screen cannot be combined with --{name} (a screened tune is one new run folder)"
            )
    confirm = DEFAULT_CONFIRM if flags["confirm"] is None else flags["confirm"]
    rounds = DEFAULT_ROUNDS if flags.get("rounds") is None else flags["rounds"]
    booleans = {name: bool(flags.get(name)) for name in ("refit", "no_calibrate")}
    return _options({**flags, "confirm": confirm, "rounds": rounds, **booleans})


def resumed_options(saved: ScreenOptions, given: ScreenOptions | None) -> ScreenOptions:
    """A resumed screened run's options: the saved ones with the flags given now on top."""
    if given is None:
        return saved
    return saved.model_copy(update={k: getattr(given, k) for k in given.model_fields_set})


def screen_spec(spec: RunSpec) -> RunSpec:
    """The sim run that screens `spec`'s space: same inputs, the simulator's own probe budget,
    and only the engines a measuring backend runs (InputError when the space has none)."""
    # The screen predicts only the engines the measurement runs: a variant of another engine
    # would be passed over as unmeasurable (`VLLMBackend.cannot_run` says why).
    engines = [e for e in spec.space.engine if e in MEASURED_ENGINES]
    if not engines:
        given = ",".join(e.value for e in spec.space.engine)
        raise InputError(
            f"--engine {given}: a screened tune measures on vLLM (--backend vllm starts vLLM, "
            "--backend torch runs the reference engine at vLLM's defaults); use --engine vllm, "
            "or a plain tune to predict other engines"
        )
    space = spec.space.model_copy(update={"engine": engines})
    update = {"backend": "sim", "backend_options": {}, "probe_budget": ProbeBudget()}
    return spec.model_copy(update={**update, "storage": None, "space": space})
