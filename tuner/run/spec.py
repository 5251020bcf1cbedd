"""Every input of a tuning run in one file (run.yaml), so the run can be repeated exactly."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tuner import __version__, catalog
from tuner.errors import InputError
from tuner.perf.capacity import LoadMode, ProbeBudget
from tuner.search.study import DEFAULT_SAMPLER, SAMPLERS
from tuner.specs import SLA, Context, GPUProfile, ModelSpec, SearchSpace, Workload

__all__ = ["DEFAULT_TRIALS", "RunSpec", "load_run_spec", "resolve_drafts", "run_dir_name"]

DEFAULT_TRIALS = 200
RUN_FILE = "run.yaml"
# What a run is about: two specs that differ here are different runs and never share a folder.
RUN_IDENTITY = ("model", "gpu", "sla", "workload", "space", "num_gpus", "drafts", "backend",
                "backend_options", "mode", "capacity_load", "probe_budget")  # fmt: skip
# What a variant's measured metrics depend on besides its engine knobs (the space does not).
METRICS_INPUTS = tuple(f for f in RUN_IDENTITY if f != "space")


class RunSpec(BaseModel):
    """The inputs of one `tuner tune` run, with catalog entries resolved to their numbers."""

    model_config = ConfigDict(extra="forbid")

    model: ModelSpec
    gpu: GPUProfile
    sla: SLA
    workload: Workload
    space: SearchSpace
    num_gpus: int = Field(default=8, ge=1, description="GPUs available for tensor parallelism")
    drafts: dict[str, ModelSpec] = Field(
        default_factory=dict, description="Draft models of the space, resolved"
    )
    model_source: str = Field(description="Model id the exports serve (HF id or path)")
    # `tuner tune` sets the mode (capacity unless a rate or concurrency is given); the default
    # reads a run.yaml written before capacity mode existed as the fixed-load run it was.
    mode: Literal["capacity", "fixed"] = Field(
        default="fixed",
        description="capacity: each variant's highest load meeting the SLA; fixed: the workload's",
    )
    capacity_load: LoadMode = Field(
        default="rate", description="Load the capacity search varies: Poisson rate or users"
    )
    probe_budget: ProbeBudget = Field(default_factory=ProbeBudget)
    backend: str = "sim"
    backend_options: dict[str, Any] = Field(default_factory=dict)
    sampler: str = DEFAULT_SAMPLER
    trials: int = Field(default=DEFAULT_TRIALS, ge=1)
    timeout_s: float | None = Field(default=None, gt=0)
    seed: int = 0
    storage: str | None = Field(default=None, description="Optuna URL; None = study.db here")
    study_name: str = "tuner"
    tuner_version: str = __version__

    def context(self) -> Context:
        """The backend context (draft resolved per trial by the evaluator)."""
        return Context(model=self.model, gpu=self.gpu, sla=self.sla, workload=self.workload,
                       num_gpus=self.num_gpus)  # fmt: skip

    @property
    def is_capacity(self) -> bool:
        """Whether this run searches each variant's capacity (not one fixed load)."""
        return self.mode == "capacity"

    def check(self) -> RunSpec:
        """Cross-field checks that pydantic field types cannot express."""
        if self.sampler not in SAMPLERS:
            raise InputError(f"unknown sampler {self.sampler!r}; allowed: {', '.join(SAMPLERS)}")
        missing = [d for d in self.space.draft_model if d not in (None, "ngram", *self.drafts)]
        if missing:
            raise InputError(f"draft models {missing} are not resolved in the run spec")
        return self

    def identity(self) -> dict[str, Any]:
        """The fields that make two runs the same run (JSON-ready)."""
        return self.model_dump(mode="json", include=set(RUN_IDENTITY))

    def differs_from(self, other: RunSpec) -> list[str]:
        """Names of the identity fields in which `other` is a different run."""
        mine, theirs = self.identity(), other.identity()
        return [f for f in RUN_IDENTITY if mine.get(f) != theirs.get(f)]

    def metrics_key(self) -> str:
        """Digest of every input besides the engine knobs that changes a variant's metrics."""
        data = self.model_dump(mode="json", include=set(METRICS_INPUTS))
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_yaml(self) -> str:
        """run.yaml text."""
        header = "# tuner run: repeat it with `tuner tune --config run.yaml`\n"
        return header + yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def resolve_drafts(space: SearchSpace) -> dict[str, ModelSpec]:
    """Catalog (or path) draft models named in the space; 'ngram' needs no model."""
    return {d: catalog.load_model(d) for d in space.draft_model if d not in (None, "ngram")}


def load_run_spec(path: Path) -> RunSpec:
    """Read run.yaml (a file or a run folder holding one)."""
    file = path / RUN_FILE if path.is_dir() else path
    spec = catalog.load_yaml_model(file, RunSpec)
    return spec.check()


def run_dir_name(spec: RunSpec, now: datetime) -> str:
    """reports/<timestamp>-<model>-<gpu>-<sla> folder name."""

    def slug(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-") or "x"

    stamp = now.strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{slug(spec.model.name)}-{slug(spec.gpu.name)}-{slug(spec.sla.name)}"


def validate_run_spec(data: dict[str, Any], where: str) -> RunSpec:
    """Validate a mapping as a RunSpec, reporting bad fields in one line."""
    try:
        return RunSpec.model_validate(data).check()
    except ValidationError as exc:
        raise InputError(catalog.format_validation_error(exc, where, RunSpec)) from exc
