"""Render docs/accuracy.md: the summary blocks `accuracy.py` prints, as markdown tables.

`python benchmarks/accuracy.py --write-docs docs/accuracy.md` calls `write_docs`; the page is
generated whole, so its numbers are always those of one run of the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from silicon import SiliconResult

from tuner.perf.bands import ValidationBands

DOCS_COMMAND = "python benchmarks/accuracy.py --disagg-jobs 2 --write-docs docs/accuracy.md"

INTRO = """\
What the simulator (`--backend sim`) gets right and wrong against measured public figures.
Only the shared constants of `tuner/perf/efficiency.py` are tuned against these rows: nothing
depends on a row's id, source or engine. The rows and their sources are in
[benchmarks/data/README.md](../benchmarks/data/README.md); how to rerun the benchmark, and the
other benchmarks, is in [how to check accuracy](howto/check-accuracy.md).

Errors are signed (predicted - measured) / measured; a table's |err| is the median absolute
error, its bias the median signed error (negative: under-predicted)."""

SILICON_NOTE = """\
Each closed-loop source's rows are replayed with the protocol that source measured with
(AIPerf burst with exact lengths; InferenceMAX's `benchmark_serving.py` with lengths in
[0.8 L, L] and its engine flags, TensorRT-LLM's batch waiting included); `benchmarks/silicon.py`
alone prints just this block. Before the B200 nvfp4 rows were modelled they were skipped, and
the other 423 rows gave 23.8% / 9.3% (TTFT / TPOT)."""

MOE_NOTE = """\
The MoE TTFT misses the 30% / 15% target and is not tuned away: measured MoE TTFT carries a
floor of about 150-300 ms on SGLang and TensorRT-LLM for DeepSeek and Qwen3-235B (even 128-token
prompts, at any concurrency; about 25-45 ms for gpt-oss on vLLM) that the roofline does not
explain; see the MoE section of [benchmarks/data/README.md](../benchmarks/data/README.md).
The 47 TensorRT-LLM DeepSeek-R1 rows on the image InferenceX ran only its MTP configs on replay
MTP speculation (3 draft tokens, 1 with attention DP; `benchmarks/silicon.py`); rows on images
both its MTP and plain configs ran cannot be told apart and replay without it."""

PROTOCOL_NOTE = """\
The same MoE rows grouped by client protocol: cold InferenceMAX runs (no warm-up) include
first-shape JIT and graph capture in their mean TTFT, which steady-state serving never pays."""

FP4_NOTE = "The nvfp4 rows of the silicon CSV (B200, W4A4 on FP4 tensor cores)."

DISAGG_NOTE = """\
Measured prefill/decode deployments (both pools' workers and layouts, closed loop at the row's
concurrency, its client protocol) replayed through `tuner/perf/disagg.py`; the issue's target is
TTFT <= 30%, TPOT <= 12% median. Missed: the TTFT floor of the MoE block shows here too (about
100-170 ms more than predicted at 4-8 users on 1k prompts, SGLang and TensorRT-LLM alike), and
a few rows carry cold-start TTFTs of 5-40 s at 3-7 users. Rows not scored, by reason: {skipped}.
Rerun alone with `python benchmarks/disagg_accuracy.py --jobs 2` (about 11 minutes here)."""

BANDS_NOTE = """\
The error band every uncalibrated prediction carries (`tuner/data/validation_bands.json`,
rewritten by `python benchmarks/accuracy.py --write-bands`): the 90th percentile of
|measured / predicted - 1| over the rows named, so about 9 in 10 measurements fall inside it.
A calibrated `--gpu` profile replaces it with the fit's residuals."""


@dataclass
class Block:
    """One printed summary block: its title, a note, its rows and their per-engine summary."""

    title: str
    note: str
    results: list[SiliconResult]
    summary: dict[str, dict[str, float]]
    group: str = "engine"


def _public_table(public: dict[str, tuple[float, int]]) -> list[str]:
    """The per-metric median absolute error of the public.csv rows."""
    lines = ["| metric | rows | median \\|err\\| |", "| --- | ---: | ---: |"]
    for metric, (err, n) in public.items():
        flag = " (fewer than 5 rows)" if n < 5 else ""
        lines.append(f"| `{metric}`{flag} | {n} | {err:.1f}% |")
    return lines


def _block_table(block: Block) -> list[str]:
    """The per-engine (or per-protocol) TTFT/TPOT errors of one block, skipped rows below."""
    lines = [
        f"| {block.group} | rows | TTFT \\|err\\| | TPOT \\|err\\| | TTFT bias | TPOT bias |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, s in block.summary.items():
        label = f"**{name}**" if name == "all" else name
        lines.append(
            f"| {label} | {int(s['rows'])} | {s['ttft_median_abs_pct']:.1f}% "
            f"| {s['tpot_median_abs_pct']:.1f}% | {s['ttft_median_signed_pct']:+.1f}% "
            f"| {s['tpot_median_signed_pct']:+.1f}% |"
        )
    skipped: dict[str, int] = {}
    for r in block.results:
        if r.skipped:
            skipped[r.skipped] = skipped.get(r.skipped, 0) + 1
    if skipped:
        lines.append("")
        lines += [f"- skipped {n}: {reason}" for reason, n in sorted(skipped.items())]
    return lines


def _bands_table(bands: ValidationBands) -> list[str]:
    """The shipped validation bands, one row per quantity."""
    lines = [
        "| quantity | band (p90) | median | rows | rows behind it |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for q, e in bands.quantities.items():
        lines.append(
            f"| {q} | {e.p90_abs_rel_error:.1%} | {e.median_abs_rel_error:.1%} | {e.rows} "
            f"| {e.basis} |"
        )
    return lines


def render(
    public: dict[str, tuple[float, int]], blocks: list[Block], bands: ValidationBands, today: str
) -> str:
    """The whole accuracy page as markdown."""
    lines = [
        "# Simulator accuracy",
        "",
        f"Generated by `{DOCS_COMMAND}` on {today}; do not edit by hand.",
        "",
        INTRO,
        "",
        "## Public figures (`benchmarks/data/public.csv`)",
        "",
        *_public_table(public),
    ]
    for block in blocks:
        lines += ["", f"## {block.title}", "", block.note, "", *_block_table(block)]
    lines += ["", "## Error bands", "", BANDS_NOTE, "", *_bands_table(bands)]
    return "\n".join(lines) + "\n"


def write_docs(
    path: Path,
    public: dict[str, tuple[float, int]],
    blocks: list[Block],
    bands: ValidationBands,
    today: str,
) -> None:
    """Write the accuracy page to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(public, blocks, bands, today))
