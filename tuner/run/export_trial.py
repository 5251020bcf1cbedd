"""`tuner export --trial N RUN`: the launch files of any evaluated trial of a run folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.errors import InputError
from tuner.export.bundle import EngineExport
from tuner.run.exports import write_exports
from tuner.run.tune import open_study, readable_study
from tuner.run_spec import load_run_spec
from tuner.search.trials import TrialRecord, record_from_frozen

__all__ = ["TrialExport", "export_trial"]


@dataclass
class TrialExport:
    """The exports of one trial, where they went, and why the trial misses the SLA if it does."""

    record: TrialRecord
    exports: dict[str, EngineExport | str]
    folder: Path
    misses_sla: str | None


def export_trial(run_dir: Path, trial: int) -> TrialExport:
    """Write vLLM / SGLang / TensorRT-LLM launch files for `trial` into RUN/exports/trial-N."""
    spec = load_run_spec(run_dir)
    study = open_study(spec, run_dir, create=False)
    with readable_study(run_dir):
        found = [t for t in study.get_trials(deepcopy=False) if t.number == trial]
    if not found:
        raise InputError(f"{run_dir}: no trial {trial} (trials 0..{len(study.trials) - 1})")
    record = record_from_frozen(found[0])
    if record.config is None:
        raise InputError(f"trial {trial} has no engine config ({record.reason or record.state})")
    folder = run_dir / "exports" / f"trial-{trial}"
    exports = write_exports(record.config, spec, folder, record.metrics)
    misses = None
    if record.metrics is not None and not record.meets(spec.sla):
        misses = record.reason or "latency bound missed"
    return TrialExport(record, exports, folder, misses)
