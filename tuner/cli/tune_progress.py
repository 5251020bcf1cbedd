"""The progress display of `tuner tune`: a Rich bar on a terminal, one line per trial otherwise."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tuner.cli.app import console
from tuner.cli.output import say
from tuner.run_spec import RunSpec
from tuner.search.parallel import count_states
from tuner.search.trials import ATTR_METRICS

__all__ = ["progress"]


def _feasible_throughput(trial: FrozenTrial) -> float | None:
    """The trial's tok/s per GPU (its capacity in capacity mode) when it met every bound."""
    constraints = trial.constraints
    metrics = trial.user_attrs.get(ATTR_METRICS)
    if not (metrics and constraints and all(v <= 0 for v in constraints.values())):
        return None
    extra = metrics.get("extra", {})
    return float(extra.get("capacity_tok_s_per_gpu") or metrics["output_tokens_per_s_per_gpu"])


class _ProgressCallback:
    """Advances the Rich bar (or prints a line) and tracks the best feasible throughput."""

    def __init__(self, bar: Progress | None, task: Any, total: int) -> None:
        self.bar, self.task, self.total = bar, task, total
        self.best: float | None = None
        self.done = 0

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        tput = _feasible_throughput(trial)
        if tput is not None:
            self.best = tput if self.best is None else max(self.best, tput)
        best = "-" if self.best is None else f"{self.best:,.0f}"
        # Other workers finish trials too: count the study's, not this process's.
        self.done = count_states(study).finished
        if self.bar is None:
            state = trial.state.name.lower()
            say(
                f"trial {trial.number} {state} ({self.done}/{self.total}); "
                f"best feasible {best} tok/s/GPU"
            )
        else:
            self.bar.update(self.task, completed=self.done, best=best)


@contextmanager
def progress(spec: RunSpec) -> Iterator[Callable[[optuna.Study, FrozenTrial], None]]:
    """A Rich bar on a terminal, one plain line per trial otherwise (logs, pipes, CI)."""
    title = f"tuning {spec.model.name} on {spec.gpu.name}"
    if not console.is_terminal:
        say(title)
        yield _ProgressCallback(None, None, spec.trials)
        return
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("best feasible {task.fields[best]} tok/s/GPU"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(escape(title), total=spec.trials, best="-")
        yield _ProgressCallback(bar, task, spec.trials)
