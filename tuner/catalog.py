"""Find and load catalog YAML (GPU profiles, models, search spaces, SLA presets) and HF configs."""

from __future__ import annotations

import difflib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tuner.errors import InputError, echo
from tuner.specs import SLA, GPUProfile, ModelSpec, SearchSpace

__all__ = [
    "data_dir",
    "nesting_depth",
    "read_text",
    "format_validation_error",
    "list_names",
    "load_gpu",
    "load_hf_config",
    "load_model",
    "load_search_space",
    "load_sla",
    "load_yaml_model",
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
}

_KIND_WORD = {
    "hardware_profiles": "GPU profile",
    "models": "model",
    "search_spaces": "search space",
    "slas": "SLA preset",
}


def data_dir(kind: str) -> Path:
    """Folder of the YAML files of one catalog kind (checkout root, or packaged in a wheel)."""
    # A wheel carries the top-level catalog folders under tuner/_catalogs/ (pyproject's
    # force-include); a checkout or an editable install reads them at the repository root.
    packaged = Path(str(resources.files("tuner"))) / "_catalogs" / kind
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / kind


def format_validation_error(err: ValidationError, where: str, model: type[BaseModel]) -> str:
    """One line naming the file/flag, each bad field, the problem and what is allowed."""
    parts, missing = [], []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "missing":
            missing.append(loc)  # listed together after the other problems
            continue
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            msg = f"unknown field; allowed fields: {allowed}"
        elif "input" in e and not isinstance(e["input"], dict):
            msg = f"{msg} (got {echo(e['input'])})"
        parts.append(f"field {echo(loc)}: {msg}")
    if missing:
        parts.append(f"required fields missing: {', '.join(missing)}")
    return f"{where}: " + "; ".join(parts)


# Deeper than any schema of ours: a deeper document is refused before it reaches pydantic.
MAX_NESTING = 32


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without aliases: `*name` could expand a few bytes into gigabytes."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        """Refuse an alias where it appears; compose every other node as SafeLoader does."""
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "YAML aliases (*name) are not allowed; write the value out",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)


def nesting_depth(data: Any) -> int:
    """How deeply lists/dicts nest in `data` (iterative: no recursion limit to hit)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:  # deeper than the limit is enough to refuse
                stack.extend(
                    (v, depth + 1) for v in (node.values() if isinstance(node, dict) else node)
                )
    return deepest


def read_text(path: Path, what: str = "file") -> str:
    """A UTF-8 text file's contents, or one InputError line naming why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); expected a {what}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{path}: is a folder; expected a {what}") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} ({exc.strerror or exc})") from exc


def _check_depth(data: Any, path: Path) -> Any:
    if nesting_depth(data) > MAX_NESTING:
        raise InputError(f"{path}: nested deeper than {MAX_NESTING} levels")
    return data


def _read_yaml(path: Path) -> Any:
    text = read_text(path, "YAML file")
    try:
        return _check_depth(yaml.load(text, Loader=_NoAliasLoader), path)  # noqa: S506 (safe)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise InputError(f"{path}: malformed YAML{at}: {problem}") from exc
    except RecursionError as exc:
        raise InputError(f"{path}: nested deeper than {MAX_NESTING} levels") from exc


def load_yaml_model(path: Path, model: type[M]) -> M:
    """Load one YAML file and validate it as `model`, raising InputError in one line."""
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a mapping of {model.__name__} fields, got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, str(path), model)) from exc


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


def _exists(path: Path) -> bool:
    """Path.exists() that answers False for names the OS refuses (too long, NUL byte)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _lookup(kind: str, name: str) -> BaseModel:
    path = Path(name)
    if path.suffix in {".yaml", ".yml"} or _is_file(path):
        if not _exists(path):
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
    if _is_dir(path) or path.name == "config.json" or path.suffix == ".json":
        return load_hf_config(path)
    obj = _lookup("models", name)
    assert isinstance(obj, ModelSpec)
    return obj


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
