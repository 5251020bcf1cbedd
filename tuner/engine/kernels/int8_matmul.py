"""Triton int8 weight-only matmul: y[M, N] = x[M, K] @ (w[N, K] * scale[N])^T.

Weights stay int8 in memory and are converted to the activation dtype in registers, so a decode
GEMV reads half the bytes of bf16. Per-channel scales are applied once to the fp32 accumulator.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from tuner.engine.kernels import interpreted

__all__ = ["int8_weight_only_matmul"]

# Interpreter/fallback tile: small enough to interpret quickly, >= 16 for tl.dot.
_FIXED = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}
# Candidate tiles for CUDA autotuning: GEMV-like (small M) and GEMM-like shapes.
_AUTOTUNE = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [
        (16, 64, 128, 4, 3),
        (16, 128, 128, 4, 4),
        (16, 256, 64, 8, 3),
        (32, 64, 256, 4, 3),
        (64, 128, 64, 4, 3),
        (128, 128, 32, 8, 3),
        (128, 256, 64, 8, 3),
    ]
]


@triton.jit
def _int8_wo_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    rk = tl.arange(0, BLOCK_K)  # [BK]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(
            x_ptr + rm[:, None] * stride_xm + kk[None, :] * stride_xk,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )  # [BM, BK]
        w = tl.load(
            w_ptr + rn[None, :] * stride_wn + kk[:, None] * stride_wk,
            mask=(rn[None, :] < N) & (kk[:, None] < K),
            other=0,
        )  # [BK, BN] int8
        acc += tl.dot(x, w.to(x.dtype))
    scale = tl.load(s_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)  # [BN]
    acc = acc * scale[None, :]
    tl.store(
        y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn,
        acc.to(y_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@functools.cache
def _autotuned() -> Any:
    return triton.autotune(configs=_AUTOTUNE, key=["M", "N", "K"])(_int8_wo_kernel)


def int8_weight_only_matmul(x: Tensor, w: Tensor, scales: Tensor) -> Tensor:
    """x [M, K] (fp16/bf16/fp32) times int8 w [N, K] with per-row scales [N] -> [M, N]."""
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    args = (x, w, scales, y, m, n, k, *x.stride(), *w.stride(), *y.stride())
    if interpreted() or not x.is_cuda:
        fixed_grid = (triton.cdiv(m, _FIXED["BLOCK_M"]), triton.cdiv(n, _FIXED["BLOCK_N"]))
        _int8_wo_kernel[fixed_grid](*args, **_FIXED)
    else:

        def grid(meta: dict[str, int]) -> tuple[int, int]:
            return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))

        _autotuned()[grid](*args)
    return y
