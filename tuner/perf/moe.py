"""Mixture-of-experts layers of one engine step: expert weight traffic, grouped GEMMs, and the
token exchange of expert parallelism, on one GPU of a TP x DP replica.

Per step the MoE layers see the tokens of every DP rank (`tokens`). Routing is taken as uniform
(the load-balanced routers of Mixtral, DeepSeek-V3, Qwen3-MoE and gpt-oss aim at that):

  weights read  = E * (1 - (1 - k/E)^tokens) touched experts x expert bytes / G
                  (G = TP x DP GPUs: whole experts under EP, a 1/G slice of each without it)
  GEMM FLOPs    = 2 x tokens x k x expert params / G; on a GPU the measured kernel tables cover,
                  at the grid's fraction of the peak for its m rows per touched expert and n
                  expert columns per GPU (tuner.perf.moe_kernels), elsewhere at the dense
                  GEMMs' rate with each touched expert's GEMM padded to at least MIN_ROWS rows
                  (the grouped GEMM's smallest M tile); under EP the most loaded GPU sets the
                  pace (binomial spread of the token-expert pairs)
  exchange      = EP: dispatch + combine all-to-all per MoE layer, each GPU sending its share
                  of the token copies (k x hidden x 2 bytes) to the other G - 1 GPUs;
                  without EP over DP ranks: all-gather + reduce-scatter of the tokens over G
                  (vLLM's naive DP dispatch); TP-only MoE folds into the TP all-reduce.

Beyond the scale-up domain (`GPUProfile.nvlink_domain`) the exchange crosses the NIC, bounded
here by the GPU's PCIe link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.perf.moe_kernels import MoEGemmGrid

__all__ = ["MIN_ROWS", "MoECost", "expected_experts_touched"]

# Smallest M tile of the grouped-GEMM kernels engines run (Hopper wgmma tiles are 64 rows; the
# fused-MoE Triton and CUTLASS configs pad each expert's token block to it).
MIN_ROWS = 64.0
FLOPS_PER_MAC = 2.0


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected distinct experts a batch of `tokens` routes to (uniform routing)."""
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


@dataclass(frozen=True)
class MoECost:
    """Coefficients of the routed-expert part of a step on one GPU (all MoE layers)."""

    num_experts: int
    experts_per_token: int
    expert_params: float  # one routed expert, all MoE layers (unsharded)
    gpus: int  # G = TP x DP: the GPUs the routed experts are spread over
    expert_parallel: bool
    data_parallel: int
    moe_layers: int
    bytes_per_param: float
    gemm_flops_per_s: float
    weight_bytes_per_s: float
    token_bytes: float  # hidden x activation bytes: one token copy on the wire
    link_bytes_per_s: float  # per direction, achievable
    exchange_latency_s: float  # one all-to-all / all-gather round's floor
    # Measured grouped-GEMM efficiency of this engine and precision (None: the roofline), the
    # peak it is a fraction of, and one expert's columns on one GPU (a TP slice without EP).
    grid: MoEGemmGrid | None = None
    peak_flops_per_s: float = 0.0
    peak_bytes_per_s: float = 0.0
    expert_cols: float = 0.0

    def time_s(self, tokens: float) -> float:
        """Seconds of the routed experts and their token exchange for `tokens` (all ranks)."""
        if tokens <= 0:
            return 0.0
        e, k, g = self.num_experts, self.experts_per_token, self.gpus
        touched = expected_experts_touched(e, k, tokens)
        weights = touched * self.expert_params * self.bytes_per_param / g
        load = _max_load_factor(tokens * k, g) if self.expert_parallel and g > 1 else 1.0
        if self.grid is not None:
            # The measured grid: the layer's roofline at the datasheet peaks over its fraction.
            flops = FLOPS_PER_MAC * tokens * k * self.expert_params / g * load
            roofline = max(flops / self.peak_flops_per_s, weights / self.peak_bytes_per_s)
            t = roofline / self.grid.efficiency(tokens * k / touched, self.expert_cols)
            t = max(t, self.moe_layers * self.grid.floor_s)
        else:
            rows = max(tokens * k / touched, MIN_ROWS) * touched
            flops = FLOPS_PER_MAC * rows * self.expert_params / g * load
            t = max(flops / self.gemm_flops_per_s, weights / self.weight_bytes_per_s)
        return t + self.exchange_s(tokens)

    def exchange_s(self, tokens: float) -> float:
        """Token exchange of the MoE layers of one step (0 when the TP all-reduce covers it)."""
        g = self.gpus
        if g <= 1 or self.data_parallel <= 1:
            return 0.0  # no attention DP: the TP all-reduce combines (see perf.costs)
        spread = (g - 1) / g
        if self.expert_parallel:
            # Each GPU dispatches its share of the tokens, one copy per distinct GPU holding one
            # of its k experts (DeepEP / pplx deduplicate), and combines the results back.
            copies = g * (1.0 - (1.0 - 1.0 / g) ** self.experts_per_token)
            per_gpu = tokens / g * copies * self.token_bytes * spread
        else:
            # All-gather the DP ranks' tokens, reduce-scatter the outputs.
            per_gpu = tokens * self.token_bytes * spread
        one = self.exchange_latency_s * math.log2(g) + per_gpu / self.link_bytes_per_s
        return 2.0 * self.moe_layers * one


def _max_load_factor(pairs: float, gpus: int) -> float:
    """Most loaded GPU's share of `pairs` token-expert pairs over the mean (binomial tail)."""
    mean = pairs / gpus
    if mean <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(gpus) / mean)
