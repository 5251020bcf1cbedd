"""A stopped tune hands back the trials it was running, so none is left RUNNING in its study.

Ctrl-C (or SIGTERM, tuner.cli.signals) inside a trial's evaluation fails and re-queues it there
(tuner.search.parallel); one that lands between asking Optuna for a trial and evaluating it, or
inside a `tell`, leaves the trial RUNNING with a live-looking owner until the next run reaps it.
"""

from __future__ import annotations

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from tuner.search.parallel import ATTR_WORKER, RequeueOnce, worker_id
from tuner.search.storage import study_lock
from tuner.search.trials import ATTR_REASON

__all__ = ["hand_back_running"]


def hand_back_running(study: optuna.Study, requeue: RequeueOnce) -> list[int]:
    """Fail this process's RUNNING trials (and unclaimed ones, which only an interrupted claim
    leaves: claims hold the study lock), each queued once more; their numbers."""
    me = worker_id()
    failed = []
    with study_lock(study._storage, study.study_name):  # noqa: SLF001
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if trial.user_attrs.get(ATTR_WORKER) not in (me, None):
                continue  # another live worker's
            try:
                study._storage.set_trial_user_attr(  # noqa: SLF001
                    trial._trial_id,  # noqa: SLF001
                    ATTR_REASON,
                    "interrupted; re-queued",
                )
                frozen = study.tell(trial.number, state=TrialState.FAIL)
            except (UpdateFinishedTrialError, RuntimeError, ValueError):
                continue  # it finished meanwhile
            requeue(study, frozen)
            failed.append(trial.number)
    return failed
