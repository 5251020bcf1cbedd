"""`tuner worker`: join a study that `tuner tune --storage URL --study NAME` created."""

from __future__ import annotations

from typing import Annotated

import optuna
import typer
from optuna.trial import FrozenTrial

from tuner.cli.app import app, console, guarded
from tuner.cli.options import ModelPath, StudyName
from tuner.errors import InputError
from tuner.run.worker import work
from tuner.search.storage import GRACE_S

__all__ = ["worker"]


class _TrialLine:
    """One plain line per trial this worker finished (survives a pipe and a log file)."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        console.print(
            f"trial {trial.number} {trial.state.name.lower()}", highlight=False, soft_wrap=True
        )


@app.command()
@guarded
def worker(
    storage: Annotated[str, typer.Option(help="Optuna storage URL of the shared study")],
    study: StudyName,
    backend: Annotated[
        str | None, typer.Option(help="Expected backend; refused if the study uses another")
    ] = None,
    model_path: ModelPath = None,
    trials: Annotated[
        int | None, typer.Option(help="Stop after this many trials of this worker")
    ] = None,
    until_done: Annotated[
        bool, typer.Option("--until-done", help="Work until the study's budget is met (default)")
    ] = False,
    grace_s: Annotated[
        int, typer.Option(help="Seconds without a heartbeat before a worker's trial is retried")
    ] = GRACE_S,
) -> None:
    """Evaluate trials of a shared study on this host until the study's trial budget is met."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if trials is not None and until_done:
        raise InputError("--trials N and --until-done are exclusive: choose one")
    if trials is not None and trials < 1:
        raise InputError(f"--trials {trials}: must be at least 1")
    if grace_s < 2:
        raise InputError(f"--grace-s {grace_s}: must be at least 2 seconds")
    outcome = work(
        storage,
        study,
        backend=backend,
        model_path=model_path,
        max_trials=trials,
        grace_s=grace_s,
        callbacks=[_TrialLine()],
    )
    # One line, whole, also in a pipe or a log file.
    console.print(outcome.summary(), markup=False, highlight=False, soft_wrap=True)
