"""Many workers on one study over a real PostgreSQL server: an exact budget with a worker killed
mid-trial, heartbeat-stale trials retried once, distinct seeds, the report from any host."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.search.parallel import ATTR_WORKER, RequeueOnce, count_states, reap_dead_trials
from tuner.search.storage import make_storage, rdb_of
from tuner.search.trials import ATTR_CONFIG

BASE = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]


def _tuner(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner", *args]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _freeze_a_worker_mid_trial(study: optuna.Study, spare_pid: int) -> tuple[int, int]:
    """SIGSTOP a worker that is evaluating a sampled variant; returns (pid, trial number)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            pid = int(str(t.user_attrs.get(ATTR_WORKER, "||0")).rpartition("|")[2])
            if pid in (0, spare_pid):
                continue
            os.kill(pid, signal.SIGSTOP)  # frozen: the trial cannot finish under our feet
            again = [x for x in study.get_trials(deepcopy=False) if x.number == t.number][0]
            if again.state == TrialState.RUNNING and ATTR_CONFIG in again.user_attrs:
                return pid, t.number  # sampled and valid: a whole variant is being evaluated
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("no worker was seen mid-trial")


@pytest.mark.slow
def test_four_workers_with_one_killed_end_with_exactly_the_budget(
    postgres_url: str, tmp_path: Path
) -> None:
    name = f"scale-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "run"
    tune = subprocess.Popen(
        _tuner(*BASE, "--trials", "200", "--storage", postgres_url, "--study", name,
               "--jobs", "4", "--run-dir", str(run)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    storage = make_storage(postgres_url)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
            if count_states(study).finished >= 20:
                break
        except KeyError:
            pass
        time.sleep(0.2)
    victim_pid, victim_trial = _freeze_a_worker_mid_trial(study, spare_pid=tune.pid)
    os.kill(victim_pid, signal.SIGKILL)
    out, err = tune.communicate(timeout=240)
    assert tune.returncode == 0, err.decode()[-3000:]
    assert "exited with code -9" in err.decode()

    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(len(trials)))  # none counted twice
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 200  # exactly the budget, none lost
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert [t.number for t in failed] == [victim_trial]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == victim_trial]
    assert len(retries) == 1 and retries[0] in finished
    assert retries[0].params == failed[0].params
    assert "died; re-queued" in failed[0].user_attrs["reason"]
    # Four processes shared the work.
    assert len({t.user_attrs[ATTR_WORKER] for t in finished}) == 4

    # The report written by tune equals one rebuilt from the storage, as on another host.
    other = tmp_path / "elsewhere"
    rebuilt = subprocess.run(
        _tuner("report", "--storage", postgres_url, "--study", name, str(other)),
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr.decode()[-2000:]
    for file in ("trials.csv", "pareto.csv", "best.yaml"):
        assert (other / file).read_text() == (run / file).read_text(), file
    assert len(_rows(run / "trials.csv")) == 201


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_heartbeat_stale_trial_of_another_host_is_retried_once(postgres_url: str) -> None:
    storage = make_storage(postgres_url, grace_s=2)
    study = optuna.create_study(study_name=f"hb-{uuid.uuid4().hex[:8]}", storage=storage)
    rdb = rdb_of(study._storage)
    assert rdb is not None

    def start(worker: str) -> optuna.trial.Trial:
        trial = study.ask()
        trial.suggest_int("x", 0, 1000)
        trial.set_user_attr(ATTR_WORKER, worker)
        rdb.record_heartbeat(trial._trial_id)
        return trial

    silent = start("far-away-host|pid:[1]|4242")
    time.sleep(3.5)  # the silent worker's heartbeat is now older than the 2 s grace period
    live = start("far-away-host|pid:[1]|4343")
    requeue = RequeueOnce()
    reap_dead_trials(study, requeue, grace_s=2)
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states[silent.number] == TrialState.FAIL
    assert states[live.number] == TrialState.RUNNING  # a live heartbeat is left alone
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].params == {"x": silent.params["x"]}
    assert requeue.failed == [silent.number]

    # The retry dies too: it is failed but not queued a third time.
    retry = study.ask()
    assert retry.number == waiting[0].number
    retry.set_user_attr(ATTR_WORKER, "far-away-host|pid:[1]|4444")
    rdb.record_heartbeat(retry._trial_id)
    time.sleep(3.5)
    rdb.record_heartbeat(live._trial_id)
    reap_dead_trials(study, requeue, grace_s=2)
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))] == [
        live.number
    ]
