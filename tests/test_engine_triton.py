"""Triton kernels match torch references under TRITON_INTERPRET=1 (fp32/fp16, fixed configs).

The interpreter must be enabled before triton is imported, so the checks run in a fresh
subprocess (tests/_triton_interp_check.py) and report max errors as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

# Max |error| allowed: fp32 is exact up to accumulation order; fp16 keeps ~3 significant digits
# on outputs of magnitude <= ~10 (matmul over K <= 96 of N(0,1) x |w| <= 1.3).
TOLERANCE = {"fp32": 1e-4, "float32": 1e-4, "fp16": 2e-2, "float16": 5e-3}


@pytest.fixture(scope="module")
def errors() -> dict[str, float]:
    script = Path(__file__).with_name("_triton_interp_check.py")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_every_kernel_case_ran(errors: dict[str, float]) -> None:
    assert sum(k.startswith("int8_matmul_") for k in errors) == 4
    assert {k for k in errors if k.startswith("paged_attention_")} == {
        "paged_attention_auto_float32",
        "paged_attention_auto_float16",
        "paged_attention_int8_float32",
    }


def test_kernels_match_torch(errors: dict[str, float]) -> None:
    for case, err in errors.items():
        dtype = next(d for d in TOLERANCE if f"_{d}" in case)
        assert err <= TOLERANCE[dtype], f"{case}: max error {err} > {TOLERANCE[dtype]}"
