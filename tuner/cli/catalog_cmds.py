"""Catalog commands: profiles, models, spaces, slas, detect."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer
import yaml
from pydantic import BaseModel
from rich.table import Table

from tuner import catalog, knobs
from tuner.cli.app import app, console, guarded
from tuner.detect import detect_gpus
from tuner.errors import InputError
from tuner.specs import IntRange, ModelSpec


def _fmt(v: float) -> str:
    return "-" if v == 0 else f"{v:g}"


@app.command()
@guarded
def profiles() -> None:
    """List the GPU profiles (datasheet numbers) the tool can model."""
    t = Table(title="GPU profiles (dense tensor-core peaks)")
    for col in (
        "name",
        "arch",
        "memory GiB",
        "bandwidth GB/s",
        "fp16 TFLOPS",
        "fp8 TFLOPS",
        "int8 TOPS",
        "int4 TOPS",
        "NVLink GB/s",
        "TDP W",
    ):
        t.add_column(col, justify="left" if col in ("name", "arch") else "right")
    for g in catalog.all_gpus():
        t.add_row(
            g.name,
            g.architecture.value,
            f"{g.memory_gib:g}",
            f"{g.memory_bandwidth_gbps:g}",
            _fmt(g.fp16_tflops),
            _fmt(g.fp8_tflops),
            _fmt(g.int8_tops),
            _fmt(g.int4_tops),
            _fmt(g.nvlink_gbps),
            f"{g.tdp_w:g}",
        )
    console.print(t)


@app.command()
@guarded
def models() -> None:
    """List the model architecture cards (any HF config.json path works too)."""
    t = Table(title="Models")
    for col in (
        "name",
        "family",
        "params (B)",
        "active (B)",
        "layers",
        "hidden",
        "heads/kv",
        "experts",
        "context",
    ):
        t.add_column(col, justify="left" if col in ("name", "family") else "right")
    for m in catalog.all_models():
        experts = f"{m.num_experts_per_tok}/{m.num_experts}" if m.is_moe else "-"
        t.add_row(
            m.name,
            m.family,
            f"{m.num_params / 1e9:.2f}",
            f"{m.num_active_params / 1e9:.2f}",
            str(m.num_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.num_kv_heads}",
            experts,
            str(m.max_context),
        )
    console.print(t)


def _knob(v: object) -> str:
    if isinstance(v, IntRange):
        return f"{v.low}..{v.high}" + (" (log)" if v.log else f" step {v.step}")
    if isinstance(v, list):
        return ", ".join("none" if x is None else str(getattr(x, "value", x)) for x in v)
    return str(v)


@app.command()
@guarded
def spaces() -> None:
    """List the search spaces and their knobs."""
    t = Table(title="Search spaces")
    t.add_column("name", overflow="fold")
    for knob in knobs.searched():
        t.add_column(knob.label, overflow="fold")
    for s in catalog.all_search_spaces():
        t.add_row(s.name, *(_knob(getattr(s, knob.name)) for knob in knobs.searched()))
    console.print(t)


@app.command()
@guarded
def slas() -> None:
    """List the SLA presets."""
    t = Table(title="SLA presets")
    for col in ("name", "TTFT ms", "TPOT ms", "percentile", "description"):
        t.add_column(col)
    for s in catalog.all_slas():
        t.add_row(
            s.name,
            "-" if s.ttft_ms is None else f"{s.ttft_ms:g}",
            "-" if s.tpot_ms is None else f"{s.tpot_ms:g}",
            f"P{s.percentile}",
            s.description,
        )
    console.print(t)


@app.command()
@guarded
def detect() -> None:
    """Show the NVIDIA GPUs on this machine and the matching profile."""
    found = detect_gpus()
    if isinstance(found, str):
        console.print(f"No NVIDIA GPU detected: {found}.")
        return
    if not found:
        console.print("No NVIDIA GPU detected: NVML reports zero devices.")
        return
    t = Table(title="Detected GPUs")
    for col in ("index", "NVML name", "memory GiB", "profile"):
        t.add_column(col)
    for g in found:
        t.add_row(str(g.index), g.name, f"{g.memory_gib:g}", g.profile or "(no match: use --gpu)")
    console.print(t)


_KIND_LOADERS = {
    "gpu": catalog.load_gpu,
    "model": catalog.load_model,
    "space": catalog.load_search_space,
    "sla": catalog.load_sla,
}


def _loader(kind: str) -> Callable[[str], BaseModel]:
    if kind not in _KIND_LOADERS:
        raise InputError(f"--kind {kind!r} is not one of: {', '.join(_KIND_LOADERS)}")
    return _KIND_LOADERS[kind]


@app.command()
@guarded
def show(
    kind: str = typer.Argument(..., help="gpu, model, space or sla"),
    name: str = typer.Argument(..., help="Catalog name, NVML alias, YAML path or HF config.json"),
) -> None:
    """Print one catalog entry as YAML (with derived numbers for models)."""
    obj = _loader(kind)(name)
    data = obj.model_dump(mode="json")
    if isinstance(obj, ModelSpec):
        data["computed_params_b"] = round(obj.num_params / 1e9, 3)
        data["computed_active_params_b"] = round(obj.num_active_params / 1e9, 3)
    console.print(yaml.safe_dump(data, sort_keys=False).rstrip(), highlight=False)


@app.command()
@guarded
def validate(
    path: Path = typer.Argument(..., help="YAML file (or HF config.json for --kind model)"),
    kind: str = typer.Option(..., "--kind", "-k", help="gpu, model, space or sla"),
) -> None:
    """Check a user-written YAML file against its schema; one line per problem, exit 2 if bad."""
    obj = _loader(kind)(str(path))
    console.print(f"{path}: valid {kind} {getattr(obj, 'name', '')!r}")
