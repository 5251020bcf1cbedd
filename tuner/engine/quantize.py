"""Weight quantization variants: replace every nn.Linear (except MoE routers) in place.

| EngineConfig.quantization | storage                            | CPU kernel                   |
|---------------------------|------------------------------------|------------------------------|
| bf16 / fp16               | 16-bit, oneDNN-prepacked on CPU    | mkldnn._linear_pointwise     |
| int8-wo                   | int8 per-channel (w8a16)           | aten._weight_int8pack_mm     |
| int4-awq / int4-gptq      | uint4 group 128 scale+zero (w4a16) | aten int4pack_mm_for_cpu    |
| fp8                       | e4m3, per-channel scale            | dequantize, then F.linear (*) |
| int8                      | int8 per-channel, dynamic int8 acts| aten._int_mm (w8a8)          |

(*) torch._scaled_mm runs on CPU but measured ~400x slower than dequantize+matmul here, so on
CPU fp8 is weight-only; on CUDA with fp8 tensor cores (sm >= 89) fp8 runs w8a8 via _scaled_mm.
On CUDA int8-wo uses the Triton dequantizing GEMV/GEMM (kernels/int8_matmul.py).
int4-awq and int4-gptq differ in how the scales are *searched*; both run the same round-to-nearest
group-128 format here (no calibration data), which is what the kernels consume.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "INT4_GROUP_SIZE",
    "QuantizedLinear",
    "kl_divergence",
    "quantization_error",
    "quantize_model",
]

INT4_GROUP_SIZE = 128  # AWQ/GPTQ default group size
_INT4_MIN_GROUP = 32  # smallest group tried when the requested one does not divide K
_INT4_INNER_K_TILES = 2  # packing parameter of the aten int4 CPU kernel (2, 4 or 8)
_INT4_PACK_N = 16  # the aten int4 CPU packing tiles output channels by 16
_FP8_MAX = 448.0  # largest finite float8_e4m3fn


class QuantizedLinear(nn.Module):
    """Base: holds the original shape; `path` names the kernel forward() runs."""

    path = "dense"
    weight: Tensor
    scales: Tensor
    scales_and_zeros: Tensor
    weight_t: Tensor

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.data.clone())

    def _finish(self, y: Tensor) -> Tensor:
        return y if self.bias is None else y + self.bias


class PackedDenseLinear(QuantizedLinear):
    """Unquantized weight prepacked in oneDNN's blocked layout (CPU).

    Measured here (1 thread, SmolLM2 shapes): bf16 GEMV streams ~10 GB/s prepacked vs ~7 GB/s
    through F.linear, with bitwise-equal outputs; so the 16-bit baseline is not handicapped.
    """

    path = "mkldnn._linear_pointwise"

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        # Layout tuned for small M (decode); prefill-sized M still runs, a little less tuned.
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.data, 1)
        self.register_buffer("weight", packed)

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.in_features)
        y = torch.ops.mkldnn._linear_pointwise(x2, self.weight, self.bias, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)


class Int8WeightOnlyLinear(QuantizedLinear):
    """w8a16: int8 weight [N, K] with one scale per output channel."""

    def __init__(self, linear: nn.Linear, use_triton: bool) -> None:
        super().__init__(linear)
        w = linear.weight.data.float()  # [N, K]
        scale = w.abs().amax(1).clamp(min=1e-8) / 127.0  # [N]
        self.register_buffer("weight", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale.to(linear.weight.dtype))
        cuda = linear.weight.is_cuda
        self.path = (
            "triton.int8_matmul"
            if (cuda and use_triton)
            else ("dequant+F.linear" if cuda else "aten._weight_int8pack_mm")
        )

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.in_features)  # [M, K]
        if self.path == "aten._weight_int8pack_mm" and torch.compiler.is_compiling():
            # Inductor pattern-matches exactly mm(x, w.t().to(bf16)) * scales into its int8
            # weight-only GEMM (a C++ AMX/AVX-512 template under max-autotune with frozen weights).
            y = torch.mm(x2, self.weight.t().to(x2.dtype)) * self.scales
        elif self.path == "aten._weight_int8pack_mm":
            y = torch._weight_int8pack_mm(x2, self.weight, self.scales)
        elif self.path == "triton.int8_matmul":
            from tuner.engine.kernels.int8_matmul import int8_weight_only_matmul

            y = int8_weight_only_matmul(x2, self.weight, self.scales)
        else:
            y = F.linear(x2, self.weight.to(x.dtype)) * self.scales
        return self._finish(y.reshape(*x.shape[:-1], self.out_features))


def int4_group_size(in_features: int, requested: int = INT4_GROUP_SIZE) -> int:
    """The requested group if it divides K, else the largest halving (>= 32) that does, else K.

    SmolLM2's K = 576 is not a multiple of 128, so its attention/MLP-in layers use group 64.
    """
    g = requested
    while g >= _INT4_MIN_GROUP:
        if in_features % g == 0:
            return g
        g //= 2
    return in_features  # one group per row


def int4_quantize(w: Tensor, group: int) -> tuple[Tensor, Tensor, Tensor]:
    """Asymmetric round-to-nearest: w [N, K] -> (q uint4-in-int32 [N, K], scale, zero [N, K/g]).

    Dequantization (the aten CPU kernel's convention): w ~= (q - 8) * scale + zero.
    """
    n, k = w.shape
    wg = w.float().reshape(n, k // group, group)
    lo, hi = wg.amin(-1), wg.amax(-1)  # [N, K/g]
    scale = ((hi - lo) / 15.0).clamp(min=1e-8)
    zero = lo + 8.0 * scale
    q = ((wg - lo[..., None]) / scale[..., None]).round().clamp(0, 15)
    return q.reshape(n, k).to(torch.int32), scale, zero


class Int4WeightOnlyLinear(QuantizedLinear):
    """w4a16, group-wise scale and zero-point, packed for aten's int4 CPU kernel."""

    def __init__(self, linear: nn.Linear, group_size: int = INT4_GROUP_SIZE) -> None:
        super().__init__(linear)
        self.group = int4_group_size(self.in_features, group_size)
        q, scale, zero = int4_quantize(linear.weight.data, self.group)
        dtype = linear.weight.dtype
        # scales_and_zeros: [K/g, N, 2] as the kernel expects.
        sz = torch.stack([scale, zero], -1).transpose(0, 1).contiguous().to(dtype)
        self.register_buffer("scales_and_zeros", sz)
        # The aten CPU packing needs N % 16 == 0 and a group that is a multiple of 32.
        packable = self.out_features % _INT4_PACK_N == 0 and self.group % 32 == 0
        if linear.weight.is_cuda or not packable:
            deq = (q.float().reshape(*scale.shape, -1) - 8) * scale[..., None] + zero[..., None]
            self.register_buffer("weight", deq.reshape(q.shape).to(dtype))
            self.path = "dequantized-int4+F.linear"
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, _INT4_INNER_K_TILES)
            self.register_buffer("weight", packed)
            self.path = "aten._weight_int4pack_mm_for_cpu"

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.in_features)
        if self.path == "aten._weight_int4pack_mm_for_cpu":
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(
                x2, self.weight, self.group, self.scales_and_zeros
            )
        else:
            y = F.linear(x2, self.weight)
        return self._finish(y.reshape(*x.shape[:-1], self.out_features))


class Fp8Linear(QuantizedLinear):
    """fp8 e4m3 weight, per-channel scale; w8a8 via _scaled_mm on fp8 GPUs, else weight-only."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        w = linear.weight.data.float()
        scale = w.abs().amax(1).clamp(min=1e-12) / _FP8_MAX  # [N]
        self.register_buffer("weight", (w / scale[:, None]).to(torch.float8_e4m3fn))
        self.register_buffer("scales", scale)
        w_cuda = linear.weight.is_cuda
        fp8_cores = w_cuda and torch.cuda.get_device_capability(linear.weight.device) >= (8, 9)
        self.path = "torch._scaled_mm" if fp8_cores else "dequant-fp8+F.linear"

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.in_features)
        if self.path == "torch._scaled_mm":
            x_scale = x2.float().abs().amax().clamp(min=1e-12) / _FP8_MAX
            xq = (x2.float() / x_scale).to(torch.float8_e4m3fn)
            one = torch.ones((), device=x.device)
            y = torch._scaled_mm(
                xq, self.weight.t(), scale_a=x_scale, scale_b=one, out_dtype=torch.float32
            )
            y = (y * self.scales).to(x.dtype)
        else:
            y = F.linear(x2, self.weight.to(x.dtype)) * self.scales.to(x.dtype)
        return self._finish(y.reshape(*x.shape[:-1], self.out_features))


class Int8DynamicLinear(QuantizedLinear):
    """w8a8 (SmoothQuant-style without smoothing): per-token dynamic int8 activations."""

    path = "aten._int_mm"

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        w = linear.weight.data.float()
        scale = w.abs().amax(1).clamp(min=1e-8) / 127.0
        q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight_t", q.t().contiguous())  # [K, N]
        self.register_buffer("scales", scale)

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.in_features).float()  # [M, K]
        x_scale = x2.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127.0  # [M, 1]
        xq = (x2 / x_scale).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, self.weight_t)  # [M, N] int32
        y = (acc.float() * x_scale * self.scales).to(x.dtype)
        return self._finish(y.reshape(*x.shape[:-1], self.out_features))


def _make(kind: str, linear: nn.Linear, use_triton: bool, int4_group_size: int) -> nn.Module:
    if kind in _DENSE:
        cpu = not linear.weight.is_cuda and torch.backends.mkldnn.is_available()
        return PackedDenseLinear(linear) if cpu else linear
    if kind == "int8-wo":
        return Int8WeightOnlyLinear(linear, use_triton)
    if kind in ("int4-awq", "int4-gptq"):
        return Int4WeightOnlyLinear(linear, int4_group_size)
    if kind == "fp8":
        return Fp8Linear(linear)
    if kind == "int8":
        return Int8DynamicLinear(linear)
    raise ValueError(f"unknown quantization {kind!r}")


_DENSE = ("bf16", "fp16", "fp32")


def quantize_model(
    model: nn.Module,
    kind: str,
    *,
    use_triton: bool = False,
    int4_group_size: int = INT4_GROUP_SIZE,
) -> dict[str, int]:
    """Replace Linear layers by the `kind` variant in place; return {kernel path: layer count}."""
    targets = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and not name.endswith("block_sparse_moe.gate")
    ]
    paths: dict[str, int] = {}
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        q = _make(kind, linear, use_triton, int4_group_size)
        setattr(parent, attr, q)
        path = getattr(q, "path", "F.linear")
        if isinstance(q, Int4WeightOnlyLinear):
            path = f"{path}(g{q.group})"
        paths[path] = paths.get(path, 0) + 1
    return paths


def kl_divergence(ref_logits: Tensor, test_logits: Tensor) -> Tensor:
    """Mean over tokens of KL(softmax(ref) || softmax(test)), in nats. Logits: [T, V]."""
    ref_logp = F.log_softmax(ref_logits.float(), -1)
    test_logp = F.log_softmax(test_logits.float(), -1)
    return (ref_logp.exp() * (ref_logp - test_logp)).sum(-1).mean()


def quantization_error(ref_logits: Tensor, test_logits: Tensor) -> dict[str, float]:
    """Max |logit difference| and mean KL of a variant against the unquantized model."""
    return {
        "max_abs_logit_diff": float((ref_logits.float() - test_logits.float()).abs().max()),
        "kl_divergence": float(kl_divergence(ref_logits, test_logits)),
    }
