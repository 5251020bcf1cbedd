"""`tuner acceptance`: measure speculative acceptance per draft position with real weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from tuner.calibrate.profile import require_calibrated, store_acceptance
from tuner.calibration_schema import AcceptanceCurve
from tuner.cli.app import app, guarded
from tuner.cli.output import print_table, say
from tuner.errors import InputError
from tuner.perf.speculative import expected_tokens_from_curve
from tuner.real_model import SMOLLM2_CATALOG_NAME
from tuner.specs import NGRAM

if TYPE_CHECKING:
    from tuner.engine.acceptance import SlotCounts

__all__ = ["acceptance"]

# Bounds of the measurement's sizes: the speculative-tokens knob's largest value, SmolLM2's
# context (models/smollm2-135m.yaml), and more threads than any host has cores.
MAX_DRAFT_POSITIONS = 8
MAX_NEW_TOKENS = 8192
MAX_THREADS = 1024


def _check_flags(
    *, model: str, draft: str, k: int, draft_quant: str, max_new_tokens: int, limit: int | None
) -> None:
    """One-line errors for flags the measurement cannot take."""
    if model != SMOLLM2_CATALOG_NAME:
        raise InputError(f"--model {model}: real weights exist for {SMOLLM2_CATALOG_NAME} only")
    if draft not in (NGRAM, "model"):
        raise InputError(f"--draft {draft}: choose ngram or model")
    if k < 1:
        raise InputError(f"--k {k}: must be at least 1")
    if draft_quant not in ("int4-awq", "int8-wo"):
        raise InputError(f"--draft-quant {draft_quant}: choose int4-awq or int8-wo")
    if max_new_tokens < 2:
        raise InputError(f"--max-new-tokens {max_new_tokens}: must be at least 2")
    if limit is not None and limit < 1:
        raise InputError(f"--limit {limit}: must be at least 1")


def _table(curve: AcceptanceCurve, reached: tuple[int, ...], accepted: tuple[int, ...]) -> Table:
    t = Table(title=f"acceptance per draft position: draft {curve.draft}")
    for col in ("position", "reached", "accepted", "P(accept | reached)", "P(reach next)"):
        t.add_column(col, justify="right")
    reach = 1.0
    for i, a in enumerate(curve.per_position):
        reach *= a
        t.add_row(str(i + 1), str(reached[i]), str(accepted[i]), f"{a:.3f}", f"{reach:.3f}")
    return t


@app.command()
@guarded
def acceptance(
    model: Annotated[str, typer.Option(help="Model with real weights")] = SMOLLM2_CATALOG_NAME,
    draft: Annotated[
        str, typer.Option(help="ngram (prompt lookup) | model (quantized copy)")
    ] = NGRAM,
    k: Annotated[
        int,
        typer.Option(
            max=MAX_DRAFT_POSITIONS,
            help=f"Draft positions measured per verify step, at most {MAX_DRAFT_POSITIONS}",
        ),
    ] = 4,
    kind: Annotated[str, typer.Option(help="Prompts measured: all | chat | code")] = "all",
    max_new_tokens: Annotated[
        int,
        typer.Option(max=MAX_NEW_TOKENS, help=f"Output cap per prompt, at most {MAX_NEW_TOKENS}"),
    ] = 48,
    draft_quant: Annotated[str, typer.Option(help="Draft model's weights: int4-awq | int8-wo")] = (
        "int4-awq"
    ),
    limit: Annotated[int | None, typer.Option(help="Measure only the first N prompts")] = None,
    threads: Annotated[
        int,
        typer.Option(
            min=0, max=MAX_THREADS, help=f"Torch CPU threads, 0..{MAX_THREADS} (0: torch's default)"
        ),
    ] = 0,
    into: Annotated[
        Path | None, typer.Option(help="Calibrated profile YAML to store the curve in")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the curve as JSON")] = False,
) -> None:
    """Measure speculative acceptance per draft position (greedy, shipped chat/code prompts)."""
    _check_flags(
        model=model,
        draft=draft,
        k=k,
        draft_quant=draft_quant,
        max_new_tokens=max_new_tokens,
        limit=limit,
    )
    try:
        import torch

        from tuner.engine.acceptance import load_prompts, measure_smollm2
    except ImportError as exc:
        raise InputError(
            f"measuring acceptance needs the engine extra ({exc.name} missing): "
            "pip install 'tuner[engine,real]'"
        ) from exc
    load_prompts(kind)  # a bad --kind fails before the weights load
    if into is not None:
        require_calibrated(into)  # before minutes of measuring, not after
    if threads:
        torch.set_num_threads(threads)
    curve, counts = measure_smollm2(
        draft=draft,
        k=k,
        kind=kind,
        max_new_tokens=max_new_tokens,
        draft_quantization=draft_quant,
        limit=limit,
    )
    if into is not None:
        store_acceptance(into, curve)
    _print_curve(curve, counts, k, into, as_json)


def _print_curve(
    curve: AcceptanceCurve, counts: SlotCounts, k: int, into: Path | None, as_json: bool
) -> None:
    """The measured curve as JSON or as a table with its expected tokens per verify step."""
    expected = expected_tokens_from_curve(curve.per_position, k)
    if as_json:
        doc = {
            **curve.model_dump(mode="json"),
            "k": k,
            "expected_tokens_per_step": expected,
            "mean_tokens_per_step": counts.mean_tokens_per_step,
            "wall_s": counts.wall_s,
        }
        typer.echo(json.dumps(doc))
        return
    print_table(_table(curve, counts.reached, counts.accepted))
    say(
        f"expected tokens per verify step: {expected:.2f} (from the curve; counted directly: "
        f"{counts.mean_tokens_per_step:.2f})"
    )
    say(f"measured on {curve.prompts}: {curve.tokens_measured} tokens in {counts.wall_s:.1f} s")
    if into is not None:
        say(f"stored in {into} (calibration.acceptance, draft {curve.draft})")
