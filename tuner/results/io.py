"""Write a result model as YAML atomically, and read a result file back through its model."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, RootModel, ValidationError

from tuner.errors import InputError

__all__ = ["SCHEMA_VERSION", "dump_result", "read_result", "write_atomic"]

# The layout every result file is written in today; files without the key are version 0.
SCHEMA_VERSION = 1

M = TypeVar("M", bound=BaseModel)
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


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


def read_result(path: Path, model: type[M], what: str, upgrade: Upgrade | None = None) -> M:
    """Parse `path` as `model`; a pre-versioned file passes through `upgrade` first."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not a YAML {what} ({exc.__class__.__name__})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a {what} (expected a mapping at the top level)")
    version = data.get("schema_version", 0)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise InputError(
            f"{path}: {what} schema_version {version!r} is newer than this tuner reads "
            f"({SCHEMA_VERSION}); upgrade tuner"
        )
    if version == 0:
        data = {**(upgrade(data) if upgrade else data), "schema_version": SCHEMA_VERSION}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        tagged = issubclass(model, RootModel)
        raise InputError(f"{path}: not a valid {what} ({_first_error(exc, tagged)})") from exc
