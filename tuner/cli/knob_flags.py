"""CLI options derived from the knob registry: one flag per knob for `predict` (a value) and
`tune` (a comma-separated list that replaces the space's choices)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import typer

from tuner.knobs import Knob, registered, searched

__all__ = ["FLAGS_PARAM", "knob_options"]

F = TypeVar("F", bound=Callable[..., Any])
FLAGS_PARAM = "knob_flags"  # the keyword the decorated command receives: {knob name: text}


def _param(knob: Knob) -> str:
    return "knob__" + knob.name


def _help(knob: Knob, mode: Literal["value", "choices"]) -> str:
    if mode == "choices":
        return f"{knob.describe()}; comma-separated values replace the space's"
    default = knob.plain(knob.default)
    return f"{knob.describe()}; default {'none' if default is None else default}"


def knob_options(mode: Literal["value", "choices"]) -> Callable[[F], F]:
    """Add one `--flag TEXT` option per knob (every knob for values, searched ones for lists);
    the command receives them as `knob_flags={name: text or None}`."""
    knobs = registered() if mode == "value" else searched()

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != FLAGS_PARAM]
        added = [
            inspect.Parameter(
                _param(k),
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[str | None, typer.Option(k.flag, help=_help(k, mode))],
            )
            for k in knobs
        ]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            flags = {k.name: kwargs.pop(_param(k), None) for k in knobs}
            return func(**kwargs, **{FLAGS_PARAM: flags})

        command.__signature__ = sig.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in [*own, *added]}
        return command  # type: ignore[return-value]

    return decorate
