"""`tuner export RUN --trial N`: any evaluated trial of a run folder to every engine's files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.errors import InputError
from tuner.export.bundle import EngineExport
from tuner.export.dispatch import write_exports
from tuner.run.spec import RunSpec
from tuner.run.tune import open_study, readable_study
from tuner.search.trials import TrialRecord, record_from_frozen

__all__ = ["TrialExport", "export_trial"]


@dataclass(frozen=True)
class TrialExport:
    """What `export_trial` wrote: the trial, its folder and each engine's export or reason."""

    record: TrialRecord
    folder: Path
    exports: dict[str, EngineExport | str]


def export_trial(spec: RunSpec, run_dir: Path, trial: int) -> TrialExport:
    """Write RUN/exports/trial-N/ for trial `trial`; a trial without a config is one line."""
    study = open_study(spec, run_dir, create=False)
    with readable_study(run_dir):
        found = [t for t in study.get_trials(deepcopy=False) if t.number == trial]
    if not found:
        raise InputError(f"{run_dir}: no trial {trial} (trials 0..{len(study.trials) - 1})")
    record = record_from_frozen(found[0])
    if record.config is None:
        raise InputError(f"trial {trial} has no engine config ({record.reason or record.state})")
    folder = run_dir / "exports" / f"trial-{trial}"
    return TrialExport(record, folder, write_exports(record.config, spec, folder, record.metrics))
