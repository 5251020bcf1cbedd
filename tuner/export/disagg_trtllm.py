"""TensorRT-LLM prefill/decode disaggregation: context + generation `trtllm-serve` workers and
`trtllm-serve disaggregated -c disagg_config.yaml` in front of them.

Sources (GitHub NVIDIA/TensorRT-LLM, stored snapshots):
  * `tensorrt_llm/llmapi/disagg_utils.py` (commit 0228a71) extract_disagg_cfg: top-level
    hostname (default localhost), port (8000), context_servers / generation_servers each with
    num_instances and urls ("host:port", split on ':' and counted against num_instances);
    other top-level keys (backend) are inherited by both sections.
  * `tensorrt_llm/commands/serve.py` (1.0-era snapshots): `trtllm-serve MODEL --host --port
    --extra_llm_api_options FILE`; `trtllm-serve disaggregated -c/--config_file,
    -t/--server_start_timeout (default 180 s), -r/--request_timeout`.
  * `tensorrt_llm/llmapi/llm_args.py` CacheTransceiverConfig: backend in {DEFAULT, UCX, NIXL,
    MPI} (main adds MOONCAKE), max_tokens_in_buffer.
  * `docs/source/features/disagg-serving.md` (main): every context/generation server sets
    cache_transceiver_config; the context servers' config disables the overlap scheduler ("not
    supported for disaggregated context servers yet"); max_tokens_in_buffer is best >= the
    longest input; CUDA_VISIBLE_DEVICES places each instance.
The worker flags and each pool's extra LLM-API options come from `tuner.export.trtllm`.
"""

from __future__ import annotations

import yaml

from tuner.deployment import Deployment
from tuner.export import trtllm
from tuner.export.bundle import EngineExport, ExportTarget, comment, shell_join
from tuner.export.disagg import (
    HOST,
    Worker,
    background,
    place,
    placement_note,
    pool_export,
    pooled_notes,
    script,
)
from tuner.specs import EngineConfig

__all__ = [
    "CACHE_BACKEND",
    "CONFIG",
    "OPTIONS",
    "SCRIPT",
    "disagg_config",
    "export",
    "pool_options",
    "server_args",
]

SCRIPT = "trtllm-disagg.sh"
CONFIG = "trtllm-disagg-config.yaml"
OPTIONS = {"prefill": "trtllm-prefill-options.yaml", "decode": "trtllm-decode-options.yaml"}
# UCX: a backend every release since 1.0 accepts by this name and the one the serving guide's
# examples use; DEFAULT would leave the choice to the release (UCX in 1.0, NIXL on main).
CACHE_BACKEND = "UCX"
# serve.py waits 180 s for the workers by default; loading a large checkpoint takes longer.
SERVER_START_TIMEOUT_S = 1800
_SECTIONS = {"prefill": "context_servers", "decode": "generation_servers"}
_SOURCE = (
    "TensorRT-LLM tensorrt_llm/commands/serve.py, tensorrt_llm/llmapi/disagg_utils.py, "
    "docs/source/features/disagg-serving.md"
)


def _plan(deployment: Deployment) -> tuple[int, list[Worker]]:
    _, front, placed = place(deployment)
    return front, placed


def pool_options(config: EngineConfig, phase: str, target: ExportTarget) -> dict[str, object]:
    """One pool's extra LLM-API options: the aggregated export's, plus the cache transceiver."""
    # No KV pool cap from target.metrics: a deployment's predicted KV capacity is not one pool's.
    tree = trtllm.extra_options(config, metrics=None, version=trtllm.LATEST)
    transceiver: dict[str, object] = {"backend": CACHE_BACKEND}
    if target.max_model_len is not None:
        # The guide: a transfer buffer holding the longest input avoids splitting its KV.
        transceiver["max_tokens_in_buffer"] = target.max_model_len
    tree["cache_transceiver_config"] = transceiver
    if phase == "prefill":
        tree["disable_overlap_scheduler"] = True
    return tree


def server_args(deployment: Deployment, target: ExportTarget) -> dict[str, list[str]]:
    """Worker name -> its `trtllm-serve` arguments (model first), reading its pool's options."""
    _, placed = _plan(deployment)
    out: dict[str, list[str]] = {}
    for w in placed:
        args = trtllm.serve_args(w.config, target.model, version=trtllm.LATEST)
        at = args.index("--extra_llm_api_options") + 1
        args[at] = OPTIONS[w.phase]
        out[w.name] = [*args, "--host", HOST, "--port", str(w.port)]
    return out


def disagg_config(deployment: Deployment) -> dict[str, object]:
    """The `trtllm-serve disaggregated -c` mapping: where it listens and every worker's URL."""
    front, placed = _plan(deployment)
    tree: dict[str, object] = {"hostname": HOST, "port": front, "backend": "pytorch"}
    for phase, section in _SECTIONS.items():
        urls = [w.address for w in placed if w.phase == phase]
        tree[section] = {"num_instances": len(urls), "urls": urls}
    return tree


def export(deployment: Deployment, target: ExportTarget) -> EngineExport:
    """TensorRT-LLM's disaggregated launch script, its configs and caveats."""
    pre = pool_export("prefill", deployment.prefill.config, target)
    dec = pool_export("decode", deployment.decode.config, target)
    _, placed = _plan(deployment)
    servers = server_args(deployment, target)
    blocks = []
    for w in placed:
        role = "context" if w.phase == "prefill" else "generation"
        why = f"{role} ({w.phase}) server {w.index}: GPUs {w.gpu_range}, {w.url}"
        argv = ["trtllm-serve", *servers[w.name]]
        blocks.append((why, background(w.env(), argv, f"{w.name}.log")))
    front = shell_join(
        ["trtllm-serve", "disaggregated", "-c", CONFIG]
        + ["--server_start_timeout", str(SERVER_START_TIMEOUT_S)]
    )
    title = f"TensorRT-LLM {trtllm.LATEST} prefill/decode disaggregation ({_SOURCE})"
    files = {
        SCRIPT: script([title], blocks, front),
        CONFIG: _yaml(title, disagg_config(deployment)),
    }
    for phase, pool in (("prefill", deployment.prefill), ("decode", deployment.decode)):
        files[OPTIONS[phase]] = _yaml(
            f"{title}: {phase} workers' extra LLM-API options",
            pool_options(pool.config, phase, target),
        )
    return EngineExport(
        engine="trtllm",
        version=trtllm.LATEST,
        command=f"sh {SCRIPT}",
        files=files,
        notes=pooled_notes(pre.notes, dec.notes) + _notes(deployment),
    )


def _yaml(title: str, tree: dict[str, object]) -> str:
    return comment(title) + yaml.safe_dump(tree, sort_keys=False)


def _notes(deployment: Deployment) -> list[str]:
    return [
        f"cache_transceiver_config.backend {CACHE_BACKEND} moves the KV between workers (NIXL "
        "and MPI are the other backends; DEFAULT lets the release choose).",
        "the context (prefill) workers run with disable_overlap_scheduler: true, as "
        "TensorRT-LLM's disaggregated-serving guide configures them.",
        f"trtllm-serve disaggregated waits up to --server_start_timeout {SERVER_START_TIMEOUT_S}"
        " s for the workers (its default, 180 s, is shorter than a large checkpoint's load).",
        placement_note(deployment, "disaggregated server"),
    ]
