"""Run NVIDIA's AIConfigurator on measured rows: JSON lines in, one estimate per line out.

Runs under an interpreter that has `aiconfigurator` installed (Python 3.11+; PyPI
`aiconfigurator` with `aiconfigurator-core`, Apache-2.0), never under tuner's own environment:
`benchmarks/aiconfigurator_compare.py` starts it with `--aic-python`. Each input line is one
row of benchmarks/data/*.csv (AIConfigurator's own column names: backend, system, isl, osl,
batch_size, tp_size, attention_dp_size, moe_tp_size, moe_ep_size, *_quant_mode); each output
line is {"id", "ttft_ms", "tpot_ms", "modes_inferred"} or {"id", "refused": reason}.
AIConfigurator's `agg` mode with its silicon database, the version it ships for the row's
engine; a row whose recorded quant modes it has no kernel data for is retried once with the
modes inferred from the checkpoint (as its CLI does when none are given).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

# The `precision` column names the KV-cache dtype ("" = 16-bit), as benchmarks/silicon.py reads it.
KV_MODES = {"": "bfloat16", "fp8": "fp8", "fp4": "fp8"}


def _int(text: str) -> int | None:
    return int(float(text)) if text and text.strip() else None


def estimate(row: dict[str, str]) -> dict[str, object]:
    """One row's AIConfigurator estimate, or why it refused."""
    from aiconfigurator.cli.api import cli_estimate  # the optional install

    kwargs = {
        "backend_name": row["backend"],
        "isl": int(row["isl"]),
        "osl": int(row["osl"]),
        "batch_size": int(float(row["batch_size"])),
        "tp_size": int(float(row["tp_size"])),
        "pp_size": _int(row.get("pp_size", "")) or 1,
        "attention_dp_size": _int(row.get("attention_dp_size", "")) or 1,
        "moe_tp_size": _int(row.get("moe_tp_size", "")),
        "moe_ep_size": _int(row.get("moe_ep_size", "")),
        "gemm_quant_mode": row.get("gemm_quant_mode") or None,
        "moe_quant_mode": row.get("moe_quant_mode") or None,
        "kvcache_quant_mode": KV_MODES.get(row.get("precision", "")),
    }
    inferred = False
    try:
        # AIConfigurator logs its fallbacks to stdout; keep this process's stdout JSON only.
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                result = cli_estimate(row["model_path"], row["system"], **kwargs)
            except Exception as exc:  # noqa: BLE001
                if "PerfDataNotAvailable" not in type(exc).__name__:
                    raise
                # No kernel data for the row's recorded modes: let it infer them from the
                # checkpoint, as its own CLI does when they are not given.
                kwargs.update(gemm_quant_mode=None, moe_quant_mode=None)
                inferred = True
                result = cli_estimate(row["model_path"], row["system"], **kwargs)
    except Exception as exc:  # noqa: BLE001 - any refusal is reported, the run goes on
        return {"id": row["id"], "refused": f"{type(exc).__name__}: {exc}"[:300]}
    return {
        "id": row["id"],
        "ttft_ms": float(result.ttft),
        "tpot_ms": float(result.tpot),
        "modes_inferred": inferred,
    }


def main() -> int:
    """Estimate each row read from stdin."""
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(estimate(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
