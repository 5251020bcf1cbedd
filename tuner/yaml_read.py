"""YAML and text files read safely (no aliases, bounded nesting, UTF-8), each failure one line.

Shared by the catalogs, Hugging Face configs, run specs, price tables and journals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tuner.errors import InputError, echo

__all__ = [
    "MAX_NESTING",
    "format_validation_error",
    "is_dir",
    "is_file",
    "load_yaml_model",
    "nesting_depth",
    "path_exists",
    "read_text",
]

M = TypeVar("M", bound=BaseModel)


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


# Far above any catalog entry, config.json or run.yaml (a few KiB): a bigger file is not one.
MAX_TEXT_BYTES = 16 * 1024 * 1024


def read_text(path: Path, what: str = "file") -> str:
    """A UTF-8 text file's contents (at most MAX_TEXT_BYTES), or one InputError line naming why
    it cannot be read."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
        if len(data) > MAX_TEXT_BYTES:
            raise InputError(
                f"{path}: larger than {MAX_TEXT_BYTES // 2**20} MiB; expected a {what}"
            )
        return data.decode("utf-8")
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


def path_exists(path: Path) -> bool:
    """Path.exists() that answers False for names the OS refuses (too long, NUL byte)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    """Path.is_dir() that answers False for names the OS refuses."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def is_file(path: Path) -> bool:
    """Path.is_file() that answers False for names the OS refuses."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False
