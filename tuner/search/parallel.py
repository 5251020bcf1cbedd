"""Run the trials of a study that other workers share: an exact budget, heartbeats, and the
trial of a dead worker failed and queued once more.

Each worker claims a trial under the study lock (`tuner.search.storage.study_lock`): it fails the
trials of dead workers, counts finished and running trials, and asks for a new trial only while
finished + running stay below the budget. So N workers end with exactly `budget` finished trials,
and a worker that finds every remaining slot taken waits, because a running trial may still die
and need its retry run. A trial is dead when its worker ran on this machine and that process is
gone (seen at once), when its heartbeat is older than the grace period (any host, RDB storages),
or when no worker ever claimed it within the grace period.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from tuner.search.storage import GRACE_S, rdb_of, study_lock
from tuner.search.trials import ATTR_REASON

__all__ = [
    "ATTR_WORKER",
    "RequeueOnce",
    "StateCounts",
    "count_states",
    "reap_dead_trials",
    "run_trials",
    "worker_id",
]

# Trial user attribute naming the process that runs it: "host|pid-namespace|pid".
ATTR_WORKER = "worker"
# Optuna's RetryHeartbeatStaleTrialCallback keys, so its retried_trial_number() reads ours too.
SYS_FAILED_TRIAL = "failed_trial"
SYS_RETRY_HISTORY = "retry_history"
# How often a worker that found every remaining slot taken looks again. At the end of a
# `tune --jobs N` the tune process waits so for the workers' last trials before it writes the
# report; a look is one count of the study's trials under the study lock.
POLL_S = 0.1
# How often a worker looks for dead workers' trials (each look costs two queries).
REAP_EVERY_S = 2.0

Objective = Callable[[Trial], Sequence[float]]
Callback = Callable[[optuna.Study, FrozenTrial], None]


def _machine() -> str:
    try:  # processes in another container share neither pid numbers nor this namespace id
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "-"
    return f"{socket.gethostname()}|{namespace}"


def worker_id(pid: int | None = None) -> str:
    """This process as a worker: host, pid namespace and pid."""
    return f"{_machine()}|{os.getpid() if pid is None else pid}"


def _process_gone(worker: str) -> bool:
    """True only when `worker` ran on this machine and its process no longer runs."""
    machine, _, pid = worker.rpartition("|")
    if machine != _machine() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    try:  # a killed child that its parent has not waited for yet is a zombie: gone too
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"])


class RequeueOnce:
    """Queue a dead worker's trial again with the knobs it had drawn, once (no retry of a retry)."""

    def __init__(self) -> None:
        self.failed: list[int] = []

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Add a WAITING copy of `trial`'s parameters unless `trial` was itself a retry."""
        self.failed.append(trial.number)
        if trial.system_attrs.get(SYS_RETRY_HISTORY) or not trial.params:
            return
        retry = optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs={SYS_FAILED_TRIAL: trial.number, SYS_RETRY_HISTORY: [trial.number]},
        )
        study.add_trial(retry)


def _unclaimed_too_long(trial: FrozenTrial, grace_s: float) -> bool:
    start = trial.datetime_start
    return start is not None and datetime.now() - start > timedelta(seconds=grace_s)


def _fail(study: optuna.Study, trial: FrozenTrial, reason: str) -> bool:
    storage = study._storage  # noqa: SLF001  (Optuna has no public way to fail another's trial)
    try:
        storage.set_trial_user_attr(trial._trial_id, ATTR_REASON, reason)  # noqa: SLF001
        return bool(storage.set_trial_state_values(trial._trial_id, TrialState.FAIL))  # noqa: SLF001
    except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError):
        return False  # finished meanwhile, or another worker failed it first


def _stale_trial_ids(study: optuna.Study) -> set[int]:
    """Running trials whose heartbeat is older than the storage's grace period."""
    storage = rdb_of(study._storage)  # noqa: SLF001
    if storage is None or storage.get_heartbeat_interval() is None:
        return set()
    return set(storage._get_stale_trial_ids(study._study_id))  # noqa: SLF001


def reap_dead_trials(study: optuna.Study, requeue: RequeueOnce, grace_s: float = GRACE_S) -> None:
    """Fail the running trials of dead workers and queue each once more (call under the lock)."""
    stale = _stale_trial_ids(study)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get(ATTR_WORKER)
        if worker is not None and _process_gone(worker):
            reason = f"worker {worker} died; re-queued"
        elif trial._trial_id in stale:  # noqa: SLF001
            reason = f"worker {worker} stopped sending heartbeats; re-queued"
        elif worker is None and _unclaimed_too_long(trial, grace_s):
            reason = "never claimed by a worker; re-queued"
        else:
            continue
        if _fail(study, trial, reason):
            requeue(study, trial)


class StateCounts:
    """How many trials of a study are in each state."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    @property
    def finished(self) -> int:
        """Trials that count toward the budget: complete or pruned."""
        return self.counts.get("COMPLETE", 0) + self.counts.get("PRUNED", 0)

    @property
    def running(self) -> int:
        """Trials some worker is evaluating now."""
        return self.counts.get("RUNNING", 0)


def count_states(study: optuna.Study) -> StateCounts:
    """Trial counts by state (one aggregate query on an RDB storage)."""
    storage = rdb_of(study._storage)  # noqa: SLF001
    if storage is not None:
        import sqlalchemy

        query = sqlalchemy.text(
            "SELECT state, COUNT(*) FROM trials WHERE study_id = :sid GROUP BY state"
        )
        with storage.engine.connect() as conn:
            rows = conn.execute(query, {"sid": study._study_id}).all()  # noqa: SLF001
        return StateCounts({str(state): int(n) for state, n in rows})
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return StateCounts(counts)


def _claim(
    study: optuna.Study, budget: int, requeue: RequeueOnce | None, grace_s: float
) -> tuple[Trial | None, StateCounts]:
    """Under the study lock: reap the dead, then ask for a trial if the budget leaves a slot."""
    with study_lock(study._storage, study.study_name):  # noqa: SLF001
        if requeue is not None:
            reap_dead_trials(study, requeue, grace_s)
        counts = count_states(study)
        if counts.finished + counts.running >= budget:
            return None, counts
        with warnings.catch_warnings():  # we beat ourselves (_heartbeat), as optimize() does
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = study.ask()  # takes a queued retry first, if any
        trial.set_user_attr(ATTR_WORKER, worker_id())
        return trial, counts


@contextmanager
def _heartbeat(study: optuna.Study, trial: Trial) -> Iterator[None]:
    """Record the trial's heartbeat in a thread while it runs (RDB storages)."""
    storage = rdb_of(study._storage)  # noqa: SLF001
    if storage is None or storage.get_heartbeat_interval() is None:
        yield
        return
    interval = storage.get_heartbeat_interval()
    stop = threading.Event()

    def beat() -> None:
        while True:
            # A missed beat is what the grace period allows for; a database that stays away
            # is reported once, by the main thread's next query (tuner.search.reconnect).
            with contextlib.suppress(Exception):
                storage.record_heartbeat(trial._trial_id)  # noqa: SLF001
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _run_one(study: optuna.Study, trial: Trial, objective: Objective, requeue: RequeueOnce) -> Any:
    with _heartbeat(study, trial):
        try:
            values = objective(trial)
        except optuna.TrialPruned:
            return study.tell(trial, state=TrialState.PRUNED)
        except BaseException:
            # Ctrl-C or a crash: the variant is not lost, another worker (or a resume) runs it.
            frozen = study.tell(trial, state=TrialState.FAIL)
            requeue(study, frozen)
            raise
        return study.tell(trial, list(values))


def run_trials(
    study: optuna.Study,
    objective: Objective,
    *,
    budget: Callable[[], int],
    max_trials: int | None = None,
    timeout_s: float | None = None,
    callbacks: Sequence[Callback] = (),
    grace_s: float = GRACE_S,
    requeue: RequeueOnce | None = None,
) -> int:
    """Run trials until the study holds `budget()` finished ones; returns how many ran here."""
    requeue = requeue or RequeueOnce()
    started = time.monotonic()
    ran, reaped_at = 0, -REAP_EVERY_S
    while max_trials is None or ran < max_trials:
        now = time.monotonic()
        if timeout_s is not None and now - started >= timeout_s:
            break
        target = budget()
        reap = now - reaped_at >= REAP_EVERY_S
        reaped_at = now if reap else reaped_at
        trial, counts = _claim(study, target, requeue if reap else None, grace_s)
        if trial is None:
            if counts.finished >= target:
                break
            time.sleep(POLL_S)  # every slot is running elsewhere; one may die and need a retry
            continue
        frozen = _run_one(study, trial, objective, requeue)
        ran += 1
        for callback in callbacks:
            callback(study, frozen)
    return ran
