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
from tuner.bench.lengths import workload_length_pairs
from tuner.bench.trace_plan import with_trace_means
from tuner.detect import MEASURING_BACKENDS
from tuner.errors import InputError
from tuner.knobs import get as get_knob
from tuner.model_spec import ModelId, Name
from tuner.perf.load import LoadMode, ProbeBudget
from tuner.request import WORKLOAD_FLAGS, flag_error
from tuner.specs import (
    DEFAULT_SAMPLER,
    MAX_SEED,
    SAMPLERS,
    SLA,
    Context,
    Engine,
    GPUProfile,
    ModelSpec,
    SearchSpace,
    Workload,
    is_model_draft,
)
from tuner.yaml_read import format_validation_error, load_yaml_model

__all__ = [
    "MEASURED_ENGINES",
    "DEFAULT_NUM_GPUS",
    "DEFAULT_TRIALS",
    "MAX_TRIALS",
    "DEFAULT_TUNE_CONCURRENCY",
    "RunSpec",
    "build_run_spec",
    "load_run_spec",
    "resolve_drafts",
    "run_dir_name",
]

DEFAULT_TRIALS = 200
# The engines a measuring backend (MEASURING_BACKENDS) runs: `--backend vllm` starts vLLM, and
# the reference engine (`--backend torch`) runs at vLLM's defaults.
MEASURED_ENGINES = (Engine.vllm,)
# A run past this is a typo, not a plan: 100k sim trials already take hours.
MAX_TRIALS = 100_000
DEFAULT_NUM_GPUS = 8
# The most GPUs a run may spread over: a deployment pool holds at most 1024 workers
# (tuner.deployment.Pool), and the disaggregated comparison splits --num-gpus into two pools.
MAX_NUM_GPUS = 1024
RUN_FILE = "run.yaml"
# Fields that say how long to search or which tuner wrote run.yaml: two specs differing only
# here are one run (a resume may raise the budget). Every other field, a new one included, is
# the run's identity (RUN_IDENTITY, derived below), so no field can be forgotten by the check.
NOT_IDENTITY = frozenset({"trials", "timeout_s", "tuner_version"})
# Backend options naming paths on one host (weights folder, server logs), not what is measured.
HOST_OPTIONS = frozenset({"model_path", "run_dir"})
# What a variant's measured metrics depend on besides its engine knobs (stored with each trial:
# changing this tuple changes every stored key, so it stays as written).
METRICS_INPUTS = (
    "model",
    "gpu",
    "sla",
    "workload",
    "num_gpus",
    "drafts",
    "backend",
    "backend_options",
    "mode",
    "capacity_load",
    "probe_budget",
)


class RunSpec(BaseModel):
    """The inputs of one `tuner tune` run, with catalog entries resolved to their numbers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # as the nouns: finite

    model: ModelSpec
    gpu: GPUProfile
    sla: SLA
    workload: Workload
    space: SearchSpace
    num_gpus: int = Field(
        default=DEFAULT_NUM_GPUS,
        ge=1,
        le=MAX_NUM_GPUS,
        description="GPUs available for tensor parallelism",
    )
    drafts: dict[str, ModelSpec] = Field(
        default_factory=dict, description="Draft models of the space, resolved"
    )
    model_source: ModelId = Field(description="Model id the exports serve (HF id or path)")
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
    trials: int = Field(default=DEFAULT_TRIALS, ge=1, le=MAX_TRIALS)
    timeout_s: float | None = Field(default=None, gt=0)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    storage: str | None = Field(default=None, description="Optuna URL; None = study.journal here")
    study_name: Name = "tuner"
    tuner_version: str = __version__

    def context(self) -> Context:
        """The backend context (draft resolved per trial by the evaluator)."""
        return Context(
            model=self.model,
            gpu=self.gpu,
            sla=self.sla,
            workload=self.workload,
            num_gpus=self.num_gpus,
        )

    @property
    def is_capacity(self) -> bool:
        """Whether this run searches each variant's capacity (not one fixed load)."""
        return self.mode == "capacity"

    def check(self) -> RunSpec:
        """Cross-field checks that pydantic field types cannot express."""
        if self.sampler not in SAMPLERS:
            raise InputError(f"unknown sampler {self.sampler!r}; allowed: {', '.join(SAMPLERS)}")
        missing = [d for d in self.space.draft_model if is_model_draft(d) and d not in self.drafts]
        if missing:
            raise InputError(f"draft models {missing} are not resolved in the run spec")
        return self

    def identity(self) -> dict[str, Any]:
        """The fields that make two runs the same run (JSON-ready)."""
        data = self.model_dump(mode="json", include=set(RUN_IDENTITY))
        options = data.get("backend_options") or {}
        data["backend_options"] = {k: v for k, v in options.items() if k not in HOST_OPTIONS}
        return data

    def metrics_key(self) -> str:
        """Digest of every input besides the engine knobs that changes a variant's metrics."""
        data = self.model_dump(mode="json", include=set(METRICS_INPUTS))
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_yaml(self) -> str:
        """run.yaml text."""
        header = "# tuner run: repeat it with `tuner tune --config run.yaml`\n"
        return header + yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


# Every field but the budgets and the version: the fields that make two runs one run.
RUN_IDENTITY = tuple(f for f in RunSpec.model_fields if f not in NOT_IDENTITY)


def resolve_drafts(space: SearchSpace) -> dict[str, ModelSpec]:
    """Catalog (or path) draft models named in the space; 'ngram' needs no model."""
    return {
        d: catalog.load_model(d) for d in space.draft_model if d is not None and is_model_draft(d)
    }


def load_run_spec(path: Path) -> RunSpec:
    """Read run.yaml (a file or a run folder holding one)."""
    file = path / RUN_FILE if path.is_dir() else path
    spec = load_yaml_model(file, RunSpec)
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
        raise InputError(format_validation_error(exc, where, RunSpec)) from exc


# Closed-loop users of the fixed-load comparison in benchmarks (a moderately busy replica): the
# default tune searches each variant's capacity instead; --concurrency / --rate fix the load.
DEFAULT_TUNE_CONCURRENCY = 32
CAPACITY_LOADS = ("rate", "users")


def _sla(preset: str, ttft_ms: float | None, tpot_ms: float | None, pct: int | None) -> SLA:
    base = catalog.load_sla(preset)
    if ttft_ms is None and tpot_ms is None and pct is None:
        return base
    update: dict[str, Any] = {"name": f"{base.name}-custom", "description": "custom bounds"}
    if ttft_ms is not None:
        update["ttft_ms"] = ttft_ms
    if tpot_ms is not None:
        update["tpot_ms"] = tpot_ms
    if pct is not None:
        update["percentile"] = pct
    try:
        return SLA.model_validate({**base.model_dump(), **update})
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, "SLA flags", SLA)) from exc


def _workload(file: Path | None, fields: dict[str, Any]) -> Workload:
    given = {k: v for k, v in fields.items() if v is not None}
    base: dict[str, Any] = {}
    if file is not None:
        base = load_yaml_model(file, Workload).model_dump()
    if "rate_rps" in given:
        base.pop("concurrency", None)
    try:
        return Workload.model_validate({**base, **given})
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        if loc and loc[0] in given:  # a flag's value: name the flag, not the field
            raise flag_error(exc, WORKLOAD_FLAGS) from exc
        where = f"workload file {file}" if file is not None else "workload flags"
        raise InputError(format_validation_error(exc, where, Workload)) from exc


def _narrow_space(space: SearchSpace, knob_flags: dict[str, str | None]) -> SearchSpace:
    """The space with the knobs given on the command line replaced by the values given."""
    given = {k: v for k, v in knob_flags.items() if v is not None}
    if not given:
        return space
    try:
        values = {k: get_knob(k).parse_list(text) for k, text in given.items()}
        return SearchSpace.model_validate({**space.model_dump(), **values, "name": space.name})
    except ValueError as exc:  # pydantic's ValidationError is a ValueError too
        if isinstance(exc, ValidationError):
            raise InputError(format_validation_error(exc, "knob flags", SearchSpace)) from exc
        raise InputError(str(exc)) from exc


def _measured_engines(space: SearchSpace, backend: str) -> SearchSpace:
    """A measuring backend serves MEASURED_ENGINES only (vLLM, or the reference engine in
    vLLM's semantics): its search keeps those, or says in one line why it cannot."""
    if backend not in MEASURING_BACKENDS:
        return space
    engines = [e for e in space.engine if e in MEASURED_ENGINES]
    if not engines:
        asked = ", ".join(e.value for e in space.engine)
        raise InputError(
            f"--backend {backend} measures vLLM variants only; --engine {asked} cannot be "
            "measured here (predict it with --backend sim, or measure --engine vllm)"
        )
    return space.model_copy(update={"engine": engines})


def _probe_budget(backend: str, probes: int | None, seconds: float | None) -> dict[str, Any]:
    """The capacity search's budget: the flags, else the backend's default (validated later)."""
    budget = ProbeBudget.measured().model_dump() if backend in MEASURING_BACKENDS else {}
    if probes is not None:
        budget["max_probes"] = probes
    if seconds is not None:
        budget["max_seconds"] = seconds
    return budget


def build_run_spec(
    *,
    model: str,
    gpu: str | GPUProfile,
    sla: str = "chat",
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    percentile: int | None = None,
    space: str = "default",
    num_gpus: int = DEFAULT_NUM_GPUS,
    workload_file: Path | None = None,
    workload_fields: dict[str, Any] | None = None,
    backend: str = "sim",
    model_path: str | None = None,
    model_source: str | None = None,
    sampler: str = DEFAULT_SAMPLER,
    trials: int = DEFAULT_TRIALS,
    timeout_s: float | None = None,
    seed: int = 0,
    storage: str | None = None,
    study_name: str = "tuner",
    compile_step: bool = False,
    knob_flags: dict[str, str | None] | None = None,
    capacity_load: str = "rate",
    probes: int | None = None,
    probe_seconds: float | None = None,
) -> RunSpec:
    """Resolve tune's flags into a RunSpec; a fixed rate or concurrency selects fixed-load mode."""
    if capacity_load not in CAPACITY_LOADS:
        raise InputError(
            f"--capacity-load {capacity_load!r} is not one of: {', '.join(CAPACITY_LOADS)}"
        )
    model_spec = catalog.load_model(model)
    search_space = _narrow_space(catalog.load_search_space(space), knob_flags or {})
    search_space = _measured_engines(search_space, backend)
    options: dict[str, Any] = {"model_path": model_path} if model_path else {}
    if compile_step:
        if backend != "torch":
            raise InputError(f"--compile applies to --backend torch only (got --backend {backend})")
        options["compile"] = True
    workload = _workload(workload_file, workload_fields or {})
    workload_length_pairs(workload.lengths_file)  # a bad --lengths file: one InputError line
    workload = with_trace_means(workload)  # a bad --trace or --sessions: one InputError line
    data = {
        "model": model_spec,
        "gpu": catalog.load_gpu(gpu),
        "sla": _sla(sla, ttft_ms, tpot_ms, percentile),
        "workload": workload,
        "mode": "fixed"
        if workload.rate_rps is not None or workload.concurrency is not None
        else "capacity",
        "capacity_load": capacity_load,
        "probe_budget": _probe_budget(backend, probes, probe_seconds),
        "space": search_space,
        "num_gpus": num_gpus,
        "drafts": resolve_drafts(search_space),
        "model_source": model_source or model_path or model_spec.hf_id or model,
        "backend": backend,
        "backend_options": options,
        "sampler": sampler,
        "trials": trials,
        "timeout_s": timeout_s,
        "seed": seed,
        "storage": storage,
        "study_name": study_name,
    }
    try:
        return RunSpec.model_validate(data).check()
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, "tune flags", RunSpec)) from exc
