"""One check for every folder and study a command writes: the inputs already there must be the
inputs of this command, else one InputError line names the fields that differ and what to do.

A run's identity is its run spec less its budgets (`RunSpec.identity`, derived from the spec's
fields); a plan's is its whole request. `tune` checks its run folder and its study, `report`
checks run.yaml against the study it rebuilds, `tuner plan` checks its --run-dir.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.errors import InputError
from tuner.run_spec import RunSpec
from tuner.search.storage import public_url

__all__ = ["check_same_run", "differing_fields", "other_run_error"]

# Longest value shown for a differing field; longer ones (a workload, a space) are only named.
_MAX_VALUE_CHARS = 40


def differing_fields(there: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """Keys of either mapping whose values differ (in `there`'s order, then `here`'s)."""
    keys = list(there) + [k for k in here if k not in there]
    return [k for k in keys if there.get(k) != here.get(k)]


def _shown(value: Any) -> str | None:
    """A short text for a value, or None when it is too big to show on one line."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        value = value["name"]  # a catalog entry: its name says which
    if value is None or isinstance(value, str | int | float | bool):
        text = repr(value)
        return text if len(text) <= _MAX_VALUE_CHARS else None
    return None


def _described(field: str, there: Any, here: Any) -> str:
    if field == "storage":  # a database URL may hold a password: never echo it
        there, here = (public_url(v) if isinstance(v, str) else v for v in (there, here))
    old, new = _shown(there), _shown(here)
    if old is None or new is None or old == new:
        return field
    return f"{field} {old} there, {new} here"


def other_run_error(
    what: str, there: Mapping[str, Any], here: Mapping[str, Any], remedy: str
) -> InputError:
    """The one-line refusal: `what` holds other inputs; the fields that differ; `remedy`."""
    fields = differing_fields(there, here)
    words = "; ".join(_described(f, there.get(f), here.get(f)) for f in fields)
    return InputError(f"{what} holds another run (differs in {words}): {remedy}")


def check_same_run(earlier: RunSpec, spec: RunSpec, what: str, remedy: str) -> None:
    """Refuse `spec` where `earlier` (the run already in `what`) is another run."""
    there, here = earlier.identity(), spec.identity()
    if differing_fields(there, here):
        raise other_run_error(what, there, here, remedy)
