"""Catalog commands: profiles, nodes, models, spaces, slas, detect."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import BaseModel

from tuner import catalog, knobs
from tuner.cli.app import app, guarded
from tuner.cli.output import print_json, print_rows, say
from tuner.deployment import NodeProfile
from tuner.detect import detect_gpus
from tuner.errors import InputError
from tuner.specs import GPUProfile, IntRange, ModelSpec


def _fmt(v: float) -> str:
    return "-" if v == 0 else f"{v:g}"


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (every field) instead")]


def _dump(items: list[BaseModel]) -> list[dict[str, object]]:
    return [i.model_dump(mode="json") for i in items]


# Header -> cell of each catalog table, side by side so a column cannot drift from its header.
_GPU_COLUMNS: tuple[tuple[str, Callable[[GPUProfile], str]], ...] = (
    ("name", lambda g: g.name),
    ("arch", lambda g: g.architecture.value),
    ("memory GiB", lambda g: f"{g.memory_gib:g}"),
    ("bandwidth GB/s", lambda g: f"{g.memory_bandwidth_gbps:g}"),
    ("fp16 TFLOPS", lambda g: _fmt(g.fp16_tflops)),
    ("fp8 TFLOPS", lambda g: _fmt(g.fp8_tflops)),
    ("int8 TOPS", lambda g: _fmt(g.int8_tops)),
    ("int4 TOPS", lambda g: _fmt(g.int4_tops)),
    ("NVLink GB/s", lambda g: _fmt(g.nvlink_gbps)),
    ("TDP W", lambda g: f"{g.tdp_w:g}"),
)
_NODE_COLUMNS: tuple[tuple[str, Callable[[NodeProfile], str]], ...] = (
    ("name", lambda n: n.name),
    ("gpu", lambda n: n.gpu),
    ("GPUs/node", lambda n: str(n.gpus_per_node)),
    ("NIC Gb/s per GPU", lambda n: f"{n.nic_gbps:g}"),
    ("NIC latency us", lambda n: f"{n.nic_latency_us:g}"),
    ("system", lambda n: n.display_name),
)
_MODEL_COLUMNS: tuple[tuple[str, Callable[[ModelSpec], str]], ...] = (
    ("name", lambda m: m.name),
    ("family", lambda m: m.family),
    ("params (B)", lambda m: f"{m.num_params / 1e9:.2f}"),
    ("active (B)", lambda m: f"{m.num_active_params / 1e9:.2f}"),
    ("layers", lambda m: str(m.num_layers)),
    ("hidden", lambda m: str(m.hidden_size)),
    ("heads/kv", lambda m: f"{m.num_attention_heads}/{m.num_kv_heads}"),
    ("experts", lambda m: f"{m.num_experts_per_tok}/{m.num_experts}" if m.is_moe else "-"),
    ("context", lambda m: str(m.max_context)),
)


def _printed_as_json(items: Sequence[BaseModel], as_json: bool) -> bool:
    """Print `items` as JSON (every field) when --json is given; whether it did."""
    if as_json:
        print_json(_dump(list(items)))
    return as_json


@app.command()
@guarded
def profiles(as_json: JsonFlag = False) -> None:
    """List the GPU profiles (datasheet numbers) the tool can model."""
    gpus = catalog.all_gpus()
    if _printed_as_json(gpus, as_json):
        return
    columns = [header for header, _ in _GPU_COLUMNS]
    rows = [[cell(g) for _, cell in _GPU_COLUMNS] for g in gpus]
    print_rows("GPU profiles (dense tensor-core peaks)", columns, rows, left=2)


@app.command()
@guarded
def nodes(as_json: JsonFlag = False) -> None:
    """List the node profiles: GPUs per node and the scale-out NIC each GPU has."""
    items = [catalog.load_node(n) for n in catalog.list_names("node_profiles")]
    if _printed_as_json(items, as_json):
        return
    columns = [header for header, _ in _NODE_COLUMNS]
    rows = [[cell(n) for _, cell in _NODE_COLUMNS] for n in items]
    print_rows(
        "Node profiles (scale-up domain: the GPU profile's nvlink_domain)", columns, rows, left=2
    )


@app.command()
@guarded
def models(as_json: JsonFlag = False) -> None:
    """List the model architecture cards (any HF config.json path works too)."""
    cards = catalog.all_models()
    if as_json:
        docs = _dump(list(cards))
        for doc, m in zip(docs, cards, strict=True):
            doc["computed_params_b"] = round(m.num_params / 1e9, 3)
            doc["computed_active_params_b"] = round(m.num_active_params / 1e9, 3)
        print_json(docs)
        return
    columns = [header for header, _ in _MODEL_COLUMNS]
    rows = [[cell(m) for _, cell in _MODEL_COLUMNS] for m in cards]
    print_rows("Models", columns, rows, left=2)


def _knob(v: object) -> str:
    if isinstance(v, IntRange):
        return f"{v.low}..{v.high}" + (" (log)" if v.log else f" step {v.step}")
    if isinstance(v, list):
        return ", ".join("none" if x is None else str(getattr(x, "value", x)) for x in v)
    return str(v)


@app.command()
@guarded
def spaces(as_json: JsonFlag = False) -> None:
    """List the search spaces and their knobs."""
    items = catalog.all_search_spaces()
    if _printed_as_json(items, as_json):
        return
    columns = ("name", *(knob.label for knob in knobs.searched()))
    rows = [(s.name, *(_knob(getattr(s, knob.name)) for knob in knobs.searched())) for s in items]
    print_rows("Search spaces", columns, rows, left=len(columns))


@app.command()
@guarded
def slas(as_json: JsonFlag = False) -> None:
    """List the SLA presets."""
    items = catalog.all_slas()
    if _printed_as_json(items, as_json):
        return
    rows = [
        (
            s.name,
            "-" if s.ttft_ms is None else f"{s.ttft_ms:g}",
            "-" if s.tpot_ms is None else f"{s.tpot_ms:g}",
            f"P{s.percentile}",
            s.description,
        )
        for s in items
    ]
    print_rows(
        "SLA presets", ("name", "TTFT ms", "TPOT ms", "percentile", "description"), rows, left=5
    )


@app.command()
@guarded
def detect(as_json: JsonFlag = False) -> None:
    """Show the NVIDIA GPUs on this machine and the matching profile."""
    found = detect_gpus()
    if as_json:
        print_json(
            {
                "gpus": [] if isinstance(found, str) else _dump(list(found)),
                "reason": found if isinstance(found, str) else None,
            }
        )
        return
    if isinstance(found, str):
        say(f"No NVIDIA GPU detected: {found}.")
        return
    if not found:
        say("No NVIDIA GPU detected: NVML reports zero devices.")
        return
    rows = [
        (str(g.index), g.name, f"{g.memory_gib:g}", g.profile or "(no match: use --gpu)")
        for g in found
    ]
    print_rows("Detected GPUs", ("index", "NVML name", "memory GiB", "profile"), rows, left=4)


_KIND_LOADERS = {
    "gpu": catalog.load_gpu,
    "model": catalog.load_model,
    "space": catalog.load_search_space,
    "sla": catalog.load_sla,
    "node": catalog.load_node,
}


def _loader(kind: str) -> Callable[[str], BaseModel]:
    if kind not in _KIND_LOADERS:
        raise InputError(f"--kind {kind!r} is not one of: {', '.join(_KIND_LOADERS)}")
    return _KIND_LOADERS[kind]


@app.command()
@guarded
def show(
    kind: str = typer.Argument(..., help="gpu, model, space, sla or node"),
    name: str = typer.Argument(..., help="Catalog name, NVML alias, YAML path or HF config.json"),
) -> None:
    """Print one catalog entry as YAML (with derived numbers for models)."""
    obj = _loader(kind)(name)
    data = obj.model_dump(mode="json")
    if isinstance(obj, ModelSpec):
        data["computed_params_b"] = round(obj.num_params / 1e9, 3)
        data["computed_active_params_b"] = round(obj.num_active_params / 1e9, 3)
    say(yaml.safe_dump(data, sort_keys=False).rstrip())


@app.command()
@guarded
def validate(
    path: Path = typer.Argument(..., help="YAML file (or HF config.json for --kind model)"),
    kind: str = typer.Option(..., "--kind", "-k", help="gpu, model, space, sla or node"),
) -> None:
    """Check a user-written YAML file against its schema; one line per problem, exit 2 if bad."""
    obj = _loader(kind)(str(path))
    say(f"{path}: valid {kind} {getattr(obj, 'name', '')!r}")
