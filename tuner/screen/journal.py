"""What a screened run keeps while it runs, so `tuner tune --resume RUN` can finish it.

A `--screen` run folder holds no run.yaml of its own (RUN/screen has the sim screen's), so the
measured run's inputs go to RUN/screened-run.yaml when it starts, and each variant the real
backend has finished measuring is appended to RUN/confirm.jsonl at once. A killed or
interrupted run loses at most the variant being measured; a resume re-screens nothing that is
finished and measures only the variants the journal lacks.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from tuner.errors import InputError
from tuner.run_spec import RUN_FILE, RunSpec, load_run_spec
from tuner.screen.options import ScreenOptions, resumed_options
from tuner.screen.variant import ConfirmedVariant, config_key
from tuner.search.storage import drop_torn_tail
from tuner.yaml_read import load_yaml_model

__all__ = [
    "JOURNAL_FILE",
    "SCREENED_RUN_FILE",
    "SCREEN_DIR",
    "ScreenedRun",
    "append_measured",
    "load_resumed",
    "load_screened_run",
    "read_measured",
    "restore_measured",
    "screen_of",
    "write_screened_run",
]

SCREENED_RUN_FILE = "screened-run.yaml"
SCREEN_DIR = "screen"
JOURNAL_FILE = "confirm.jsonl"


class ScreenedRun(BaseModel):
    """The inputs of a screened run: the measured run's spec and the screened tune's options."""

    model_config = ConfigDict(extra="forbid")

    spec: RunSpec
    options: ScreenOptions


def write_screened_run(run_dir: Path, spec: RunSpec, options: ScreenOptions) -> None:
    """Record the run's inputs before any work, for `tune --resume`."""
    doc = ScreenedRun(spec=spec, options=options).model_dump(mode="json")
    (run_dir / SCREENED_RUN_FILE).write_text(
        "# tuner: a screened run's inputs; continue it with `tuner tune --resume <this folder>`\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )


def screen_of(run_dir: Path) -> Path | None:
    """The simulator screen inside a `--screen` run folder; None for any other folder."""
    screen = run_dir / SCREEN_DIR
    if not (run_dir / RUN_FILE).exists() and (screen / RUN_FILE).is_file():
        return screen
    return None


def load_screened_run(run_dir: Path) -> ScreenedRun | None:
    """The screened run recorded in `run_dir` (None when it is not a screened run folder)."""
    file = run_dir / SCREENED_RUN_FILE
    if not file.is_file():
        if screen_of(run_dir) is not None:
            raise InputError(
                f"{run_dir} is a --screen run written before screened runs recorded their inputs "
                f"({SCREENED_RUN_FILE}): it cannot be resumed; `tuner report {run_dir}` rebuilds "
                "its screen"
            )
        return None
    run = load_yaml_model(file, ScreenedRun)
    run.spec.check()
    return run


def load_resumed(
    run_dir: Path, given: ScreenOptions | None
) -> tuple[RunSpec, ScreenOptions | None]:
    """The spec of the run folder to resume, and its screen options if it is a screened run
    (`given`, the screen flags of this command, on top)."""
    screened = load_screened_run(run_dir)
    if screened is not None:
        return screened.spec, resumed_options(screened.options, given)
    if given is not None:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(given.model_fields_set))
        raise InputError(
            f"{flags}: {run_dir} is not a screened run (--screen sim); these flags only change a "
            "screened run on --resume"
        )
    return load_run_spec(run_dir), None


def append_measured(run_dir: Path, variant: ConfirmedVariant) -> None:
    """Append one finished measurement and push it to disk (it cost minutes of a real server)."""
    file = run_dir / JOURNAL_FILE
    if file.is_file():
        # A line torn by a kill or a full disk would glue onto this one and make the journal
        # unreadable; the run folder's lock makes this process its only writer.
        drop_torn_tail(file)
    with file.open("a") as fh:
        fh.write(variant.model_dump_json() + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_measured(run_dir: Path) -> dict[str, ConfirmedVariant]:
    """The journal's variants by knobs (a torn last line, from a kill mid-write, is dropped)."""
    file = run_dir / JOURNAL_FILE
    if not file.is_file():
        return {}
    lines = file.read_text().splitlines()
    done: dict[str, ConfirmedVariant] = {}
    for number, line in enumerate(lines, start=1):
        try:
            variant = ConfirmedVariant.model_validate_json(line)
        except ValidationError as exc:
            if number == len(lines):
                break
            why = exc.errors()[0]["msg"]
            raise InputError(f"{file}:{number}: not a measured variant ({why})") from None
        done[config_key(variant.config)] = variant
    return done


def restore_measured(
    variants: list[ConfirmedVariant],
    done: dict[str, ConfirmedVariant],
    ranks: dict[int, int] | None = None,
) -> list[ConfirmedVariant]:
    """`variants` with each one the journal holds replaced by its measurement (its role and rank
    stay those of this pick), then the journal's variants this pick no longer holds (a longer
    screen moved them off the top K; `ranks`, screen trial -> rank, gives their rank now):
    measured evidence is never dropped."""
    out = []
    for v in variants:
        old = done.get(config_key(v.config))
        if old is None:
            out.append(v)
            continue
        keep = {
            "role": v.role,
            "predicted_rank": v.predicted_rank,
            "screen_trial": v.screen_trial,
            "round": v.round,
            "restored": True,
        }
        out.append(old.model_copy(update=keep))
    picked = {config_key(v.config) for v in variants}
    for key, old in done.items():
        if key not in picked:
            rank = old.predicted_rank
            if ranks and old.screen_trial is not None:
                rank = ranks.get(old.screen_trial, rank)
            out.append(old.model_copy(update={"restored": True, "predicted_rank": rank}))
    return out
