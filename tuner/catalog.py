"""Find and load catalog YAML (GPU profiles, models, search spaces, SLA presets) and HF configs."""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from tuner.deployment import NodeProfile
from tuner.errors import InputError, echo
from tuner.specs import SLA, GPUProfile, ModelSpec, SearchSpace
from tuner.yaml_read import is_dir, is_file, load_yaml_model, path_exists

__all__ = [
    "data_dir",
    "list_names",
    "load_gpu",
    "load_hf_config",
    "load_model",
    "load_node",
    "node_for_gpu",
    "load_search_space",
    "load_sla",
    "all_gpus",
    "all_models",
    "all_search_spaces",
    "all_slas",
]

M = TypeVar("M", bound=BaseModel)

# Catalog kinds: top-level folder and the pydantic model that validates each file.
_KINDS: dict[str, type[BaseModel]] = {
    "hardware_profiles": GPUProfile,
    "models": ModelSpec,
    "search_spaces": SearchSpace,
    "slas": SLA,
    "node_profiles": NodeProfile,
}

_KIND_WORD = {
    "hardware_profiles": "GPU profile",
    "models": "model",
    "search_spaces": "search space",
    "slas": "SLA preset",
    "node_profiles": "node profile",
}


def data_dir(kind: str) -> Path:
    """Folder of the YAML files of one catalog kind (checkout root, or packaged in a wheel)."""
    # A wheel carries the top-level catalog folders under tuner/_catalogs/ (pyproject's
    # force-include); a checkout or an editable install reads them at the repository root.
    packaged = Path(str(resources.files("tuner"))) / "_catalogs" / kind
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / kind


@cache
def _catalog(kind: str) -> dict[str, BaseModel]:
    items: dict[str, BaseModel] = {}
    for path in sorted(data_dir(kind).glob("*.yaml")):
        obj = load_yaml_model(path, _KINDS[kind])
        name = getattr(obj, "name", path.stem)
        if name != path.stem:
            raise InputError(
                f"{path}: field 'name' is {name!r} but the file is named {path.stem!r}"
            )
        items[name] = obj
    return items


def list_names(kind: str) -> list[str]:
    """Sorted catalog names of one kind."""
    return sorted(_catalog(kind))


def _unknown(kind: str, name: str, choices: list[str]) -> InputError:
    close = difflib.get_close_matches(name.lower(), choices, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return InputError(
        f"unknown {_KIND_WORD[kind]} {echo(name)}.{hint} Allowed: {', '.join(choices)}"
        " (or a path to a YAML file)"
    )


def _lookup(kind: str, name: str) -> BaseModel:
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or is_file(path):
        if not path_exists(path):
            raise InputError(f"{path}: no such file")
        return load_yaml_model(path, _KINDS[kind])
    items = _catalog(kind)
    if name in items:
        return items[name]
    raise _unknown(kind, name, sorted(items))


def load_gpu(name: str | GPUProfile) -> GPUProfile:
    """A GPU profile by catalog name, NVML alias (case-insensitive) or YAML path (or as given)."""
    if isinstance(name, GPUProfile):
        return name
    items = _catalog("hardware_profiles")
    for gpu in items.values():
        assert isinstance(gpu, GPUProfile)
        if name.lower() in (a.lower() for a in gpu.aliases):
            return gpu
    obj = _lookup("hardware_profiles", name)
    assert isinstance(obj, GPUProfile)
    return obj


def load_model(name: str) -> ModelSpec:
    """A model by catalog name, YAML card, HF `config.json` file or model directory."""
    path = Path(name)
    if is_dir(path) or path.name == "config.json" or path.suffix == ".json":
        return load_hf_config(path)
    obj = _lookup("models", name)
    assert isinstance(obj, ModelSpec)
    return obj


def load_node(name: str) -> NodeProfile:
    """A node profile by catalog name or YAML path."""
    obj = _lookup("node_profiles", name)
    assert isinstance(obj, NodeProfile)
    return obj


def node_for_gpu(gpu: GPUProfile) -> NodeProfile | None:
    """The catalog node built from `gpu` (first by name), or None when the catalog has none."""
    for name in list_names("node_profiles"):
        node = load_node(name)
        if node.gpu == gpu.name:
            return node
    return None


def load_search_space(name: str) -> SearchSpace:
    """A search space by catalog name or YAML path."""
    obj = _lookup("search_spaces", name)
    assert isinstance(obj, SearchSpace)
    return obj


def load_sla(name: str) -> SLA:
    """An SLA preset by name or YAML path."""
    obj = _lookup("slas", name)
    assert isinstance(obj, SLA)
    return obj


def all_gpus() -> list[GPUProfile]:
    """Every packaged GPU profile."""
    return [load_gpu(n) for n in list_names("hardware_profiles")]


def all_models() -> list[ModelSpec]:
    """Every packaged model card."""
    return [load_model(n) for n in list_names("models")]


def all_search_spaces() -> list[SearchSpace]:
    """Every packaged search space."""
    return [load_search_space(n) for n in list_names("search_spaces")]


def all_slas() -> list[SLA]:
    """Every packaged SLA preset."""
    return [load_sla(n) for n in list_names("slas")]


def load_hf_config(path: Path) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face `config.json` (file or model directory)."""
    # Imported here: tuner.hf_config reads its file through this module's helpers.
    from tuner.hf_config import load_hf_config as load

    return load(path)
