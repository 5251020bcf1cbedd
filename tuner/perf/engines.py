"""What each serving engine does beyond its kernels, one record per engine: how it admits and
evicts, whether decodes ride in prefill steps, its default step budget, batch waiting and
attention-DP balancing, and which steps replay a captured CUDA graph (the rest launch every
kernel of every layer from the host).

Every field is read from the engine's own source; docs/engines.md gives the file, function and
line of each (section numbers below). The simulator (`tuner.perf.scheduler`) obeys the record
of the variant's `engine` knob.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from tuner.specs import Engine

__all__ = [
    "ENGINE_MODELS",
    "ENGINE_NAMES",
    "SGLANG_EAGER_KERNEL_S",
    "Admission",
    "EngineModel",
    "engine_model",
]

# How an engine decides what may hold KV blocks (docs/engines.md section 1):
# recompute: admit on the blocks needed now; when a decode needs a block and none is free, evict
#   the newest running sequence and prefill it again later (vLLM V1 `Scheduler._preempt_request`).
# retract: the same eviction, SGLang's `ScheduleBatch.retract_decode` (its admission reserves a
#   decaying share of each request's remaining output; modelled as recompute).
# no_evict: TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT,
#   `GuaranteedNoEvictPolicy.schedule`): admit a request only while the blocks every admitted
#   request needs to its last output token fit; never evict.
Admission = Literal["recompute", "retract", "no_evict"]


@dataclass(frozen=True)
class EngineModel:
    """One engine's scheduling and graph-capture behaviour at the version its source was read."""

    name: str
    display_name: str
    version: str  # the release whose source these fields were read from (docs/engines.md)
    admission: Admission
    # Decodes ride in a step that carries prefill chunks (vLLM, TensorRT-LLM); False: a pending
    # prefill runs in a step of its own and the decodes wait (SGLang, `enable_mixed_chunk` off).
    mix_prefill_decode: bool
    # Steps with prefill tokens launch eagerly (no captured graph covers them).
    eager_prefill: bool
    # Tokens a step may carry and still replay a captured graph (decode batches above run eager;
    # vLLM's capture sizes cover mixed steps too, up to this many tokens).
    graph_max_tokens: int
    # True: only the captured sizes replay (TensorRT-LLM pads nothing by default); False: a
    # smaller step is padded up to the next captured size.
    graph_exact_sizes: bool = False
    # True: a step outside the graphs still runs compiled code with no host sync, so its kernel
    # launches hide behind the GPU's work (vLLM's torch.compile'd model); False: the eager
    # PyTorch path syncs with the host (MoE routing counts, sampling), serializing the launches.
    eager_overlaps_gpu: bool = False
    # Attention-DP balancing (TensorRT-LLM `attention_dp_config.enable_balance`, off by default):
    # while sequences decode, a new prompt waits up to this many iterations for every DP rank to
    # have one. 0 = off.
    adp_balance_wait_iters: int = 0
    # Steps between the scheduler's polls for new requests (SGLang `--scheduler-recv-interval`,
    # default 1: every step). Its `SchedulerRecvSkipper.handle` counts a decode step 1 and a
    # prefill step 1000 against this threshold, so while others decode a new request waits for
    # the next poll, and right after a prefill step the scheduler polls at once.
    recv_interval_steps: int = 1
    # Host seconds per kernel of an eager step, measured on this engine; None: the generic
    # `Efficiency.eager_launch_s`.
    eager_kernel_s: float | None = None
    # Disaggregated decode worker: True when it streams the first token the prefill worker
    # sampled and the request joins its decode batch with no forward of its own (SGLang's
    # `event_loop_normal_disagg_decode` "fake extend output"; TensorRT-LLM's generation-only
    # requests, `PyExecutor._handle_first_token_response`); False when it recomputes the last
    # prompt position for its logits (vLLM's NIXL connector: all-cached prompts recompute the
    # last token, `KVCacheManager.get_computed_blocks`, 0.32.0 l.289).
    disagg_first_token_from_prefill: bool = False

    def graph_step(self, tokens: int, prefill_tokens: int) -> bool:
        """Whether a step of `tokens` tokens (`prefill_tokens` of them prefill) replays a graph."""
        if prefill_tokens and self.eager_prefill:
            return False
        if tokens > self.graph_max_tokens:
            return False
        return not self.graph_exact_sizes or tokens in _TRTLLM_CAPTURED


# SGLang's eager steps, measured: batch-1 decode with --disable-cuda-graph is host bound, so the
# step time less the 0.6 ms step overhead (`Efficiency.step_overhead_s`) over the kernels
# `tuner.perf.costs.layer_kernels` counts is the host cost of one kernel. Llama-3-8B on H100:
# 8.23 ms (FlashInfer attention) and 9.28 ms (Triton), 320 kernels = 24 and 27 us
# (sgl-project/sglang PR #1401, 2024-09); DeepSeek-Coder-V2-Lite (MLA + MoE, 587 kernels):
# about 4 x its 6.22 ms graphed step = 41 us (same PR), 31 ms per token on A100 = 52 us
# (sgl-project/sglang issue #1369). Their median, 34 us (tests/test_engine_behaviours.py).
SGLANG_EAGER_KERNEL_S = 0.000035

# TensorRT-LLM's default CUDA-graph batch sizes: 1..31, 32, 64, 128 (`CudaGraphConfig`
# `_generate_cuda_graph_batch_sizes`, docs/engines.md section 5), replayed only at those sizes.
_TRTLLM_CAPTURED = frozenset([*range(1, 32), 32, 64, 128])

ENGINE_MODELS: dict[str, EngineModel] = {
    # vLLM 0.34.0: V1 scheduler (decodes first, then chunked prefill in the token budget);
    # cudagraph_capture_sizes up to 512 tokens (full graphs for decode, piecewise for mixed
    # steps), larger steps eager (docs/engines.md sections 1, 2, 5).
    "vllm": EngineModel(
        name="vllm",
        display_name="vLLM",
        version="0.34.0",
        admission="recompute",
        mix_prefill_decode=True,
        eager_prefill=False,
        graph_max_tokens=512,
        eager_overlaps_gpu=True,
    ),
    # SGLang 0.5.9 (the release most measured rows ran; 0.5.23 adds breakable prefill graphs):
    # prefill first (`get_next_batch_to_run`), retraction on a full pool, decode graphs up to
    # `cuda_graph_max_bs` (256 below TP 4 on H100/H200, 512 from TP 4), prefill eager.
    "sglang": EngineModel(
        name="sglang",
        display_name="SGLang",
        version="0.5.9",
        admission="retract",
        mix_prefill_decode=False,
        eager_prefill=True,
        graph_max_tokens=256,
        eager_kernel_s=SGLANG_EAGER_KERNEL_S,
        disagg_first_token_from_prefill=True,
    ),
    # TensorRT-LLM PyTorch backend (1.2): GUARANTEED_NO_EVICT, in-flight batching mixes context
    # and generation, decode-only graphs, context steps eager. Its default CudaGraphConfig
    # captures 1..31, 32, 64, 128 only; the tuner's export sets `enable_padding: true` and
    # `max_batch_size` to the variant's max_num_seqs (what trtllm-bench does), so `engine_model`
    # widens these padded graphs to the variant's batch (docs/engines.md section 5).
    "trtllm": EngineModel(
        name="trtllm",
        display_name="TensorRT-LLM",
        version="1.2.0rc6",
        admission="no_evict",
        mix_prefill_decode=True,
        eager_prefill=True,
        graph_max_tokens=128,
        graph_exact_sizes=False,
        disagg_first_token_from_prefill=True,
    ),
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_MODELS)
# SGLang sizes its decode graphs by GPU memory; from this size on (B200) it captures up to 512.
_SGLANG_BIG_GPU_GB = 160.0


def engine_model(
    engine: Engine | str,
    tensor_parallel_size: int = 1,
    gpu_memory_gb: float = 80.0,
    graph_batch_tokens: int | None = None,
) -> EngineModel:
    """The behaviour record of `engine` on this replica (ValueError if the name is unknown);
    `graph_batch_tokens`: decode tokens per rank the exported TensorRT-LLM graphs capture."""
    name = Engine(engine).value
    model = ENGINE_MODELS[name]
    if name == "trtllm" and graph_batch_tokens is not None:
        # tuner.export.trtllm writes cuda_graph_config {enable_padding, max_batch_size}.
        return replace(model, graph_max_tokens=max(graph_batch_tokens, model.graph_max_tokens))
    if name == "sglang" and (tensor_parallel_size >= 4 or gpu_memory_gb >= _SGLANG_BIG_GPU_GB):
        # `cuda_graph_max_bs` is 512 from TP 4 and on >= 160 GB GPUs (`handle_gpu_memory_settings`)
        return replace(model, graph_max_tokens=512)
    return model
