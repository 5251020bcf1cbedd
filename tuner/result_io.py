"""Write a result model as YAML atomically, and read a result file back through its model.

Each file kind has its own `schema_version`: the number of upgrades its reader knows. A file
without the key is version 0 (written before versioning); reading applies the upgrades from the
file's version on, so every older layout a tuner has written still loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, RootModel, ValidationError

from tuner.errors import InputError

__all__ = ["Upgrade", "dump_result", "keep_layout", "read_result", "write_atomic"]

M = TypeVar("M", bound=BaseModel)
# Version n's content -> version n + 1's.
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def keep_layout(data: dict[str, Any]) -> dict[str, Any]:
    """The upgrade of a version that only added `schema_version`."""
    return data


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename: a reader (or Ctrl-C) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def dump_result(model: BaseModel, header: str = "") -> str:
    """The YAML text of a result model: `schema_version` first, then its fields in order."""
    data = model.model_dump(mode="json")
    data = {"schema_version": data.pop("schema_version"), **data}
    return header + yaml.safe_dump(data, sort_keys=False)


def _first_error(exc: ValidationError, tagged: bool) -> str:
    err = exc.errors()[0]
    loc = err["loc"][1:] if tagged and len(err["loc"]) > 1 else err["loc"]  # drop a union's tag
    where = ".".join(str(p) for p in loc) or "top level"
    return f"{where}: {err['msg']}"


def _parse(path: Path, what: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not a YAML {what} ({exc.__class__.__name__})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a {what} (expected a mapping at the top level)")
    return data


def read_result(path: Path, model: type[M], what: str, upgrades: Sequence[Upgrade]) -> M:
    """Parse `path` as `model`, first upgrading an older layout (`upgrades[n]`: n -> n + 1)."""
    data = _parse(path, what)
    version = data.pop("schema_version", 0)
    if not isinstance(version, int) or not 0 <= version <= len(upgrades):
        raise InputError(
            f"{path}: {what} schema_version {version!r} is not one this tuner reads "
            f"(0 to {len(upgrades)}); a newer tuner wrote it?"
        )
    for upgrade in upgrades[version:]:
        data = upgrade(data)
    try:
        return model.model_validate({**data, "schema_version": len(upgrades)})
    except ValidationError as exc:
        tagged = issubclass(model, RootModel)
        raise InputError(f"{path}: not a valid {what} ({_first_error(exc, tagged)})") from exc
