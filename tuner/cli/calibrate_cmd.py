"""`tuner calibrate`: measure this device, fit the simulator's constants, write a --gpu profile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tuner import catalog
from tuner.calibrate.torch_run import Calibrated
from tuner.cli.app import app, err_console, guarded
from tuner.cli.options import ModelPath
from tuner.cli.output import print_table, say
from tuner.errors import InputError, echo
from tuner.perf.efficiency import DEFAULT_EFFICIENCY
from tuner.specs import ModelSpec

__all__ = ["calibrate"]

_DEFAULT_MODEL = {"torch": "llama-tiny-20m", "vllm": "smollm2-135m"}
# The reference engine builds the model in memory (random weights unless --model-path):
# refuse what would not fit in half of this host's memory.
_MEMORY_SHARE = 0.5


def _progress(text: str) -> None:
    err_console.print(f"calibrate: {text}", markup=False, highlight=False)


def _check_fits(spec: ModelSpec) -> None:
    import os

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = 2.0 * spec.num_params
    if need > _MEMORY_SHARE * memory:
        raise InputError(
            f"--model {spec.name}: its bfloat16 weights ({need / 1024**3:.1f} GiB) exceed half of "
            f"this host's memory ({memory / 1024**3:.1f} GiB); calibrate with a smaller model"
        )


def _report(done: Calibrated, out: Path, seconds: float) -> None:
    cal = done.profile.calibration
    assert cal is not None
    fitted = Table(title="fitted efficiency constants")
    for col in ("constant", "fitted", "default"):
        fitted.add_column(col, justify="left" if col == "constant" else "right")
    for name, value in cal.efficiency.items():
        fitted.add_row(name, f"{value:.4g}", f"{getattr(DEFAULT_EFFICIENCY, name):.4g}")
    print_table(fitted)
    residuals = Table(title="fit residuals |predicted/measured - 1|")
    for col in ("quantity", "median", "p90", "count"):
        residuals.add_column(col, justify="left" if col == "quantity" else "right")
    for name, r in cal.residuals.items():
        residuals.add_row(
            name, f"{r.median_abs_rel_error:.1%}", f"{r.p90_abs_rel_error:.1%}", str(r.count)
        )
    print_table(residuals)
    g = cal.grid
    say(
        f"grid: batch {g.batch[0]}-{g.batch[1]}, context {g.context[0]}-{g.context[1]} tokens, "
        f"chunk {g.chunk[0]}-{g.chunk[1]} tokens ({done.measurements} measurements)"
    )
    say(
        f"device: {done.profile.display_name}: {done.profile.memory_bandwidth_gbps:g} GB/s, "
        f"{done.profile.fp16_tflops:g} TFLOPS 16-bit (measured)"
    )
    say(f"wrote {out} in {seconds:.0f} s; use it as --gpu {out}")


@app.command()
@guarded
def calibrate(
    backend: Annotated[
        str, typer.Option(help="torch: time the reference engine's steps; vllm: time a vLLM server")
    ] = "torch",
    model: Annotated[
        str | None,
        typer.Option(help="Catalog model measured (default llama-tiny-20m / smollm2-135m)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Profile YAML to write (default calibrated-<host>.yaml)")
    ] = None,
    model_path: ModelPath = None,
    threads: Annotated[
        int | None, typer.Option(min=1, help="torch: CPU threads (default: torch's own choice)")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", hidden=True)] = False,
) -> None:
    """Measure this device (CPU without a GPU), fit the simulator to it, write a --gpu profile."""
    from tuner.calibrate.profile import default_output, keep_acceptance, write_profile

    if backend not in _DEFAULT_MODEL:
        raise InputError(f"--backend {echo(backend)} is not one of: torch, vllm")
    spec = catalog.load_model(model or _DEFAULT_MODEL[backend])
    start = time.perf_counter()
    if backend == "torch":
        from tuner.calibrate.measure import QUICK_GRID, STEP_GRID
        from tuner.calibrate.torch_run import calibrate_torch

        if model_path is None:
            _check_fits(spec)
        done = calibrate_torch(
            spec,
            grid=QUICK_GRID if quick else STEP_GRID,
            threads=threads,
            model_path=model_path,
            progress=_progress,
        )
    else:
        from tuner.calibrate.vllm_run import QUICK_RUNS, REQUEST_RUNS, calibrate_vllm

        done = calibrate_vllm(
            spec,
            runs=QUICK_RUNS if quick else REQUEST_RUNS,
            model_path=model_path,
            progress=_progress,
        )
    path = out or default_output(done.profile)
    write_profile(keep_acceptance(done.profile, path), path)
    _report(done, path, time.perf_counter() - start)
