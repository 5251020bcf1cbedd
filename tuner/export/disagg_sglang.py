"""SGLang prefill/decode disaggregation: x prefill + y decode servers and the PD router.

Sources, read in the PyPI wheels sglang 0.5.23 and sglang-router 0.3.2:
  * `sglang/srt/arg_groups/fields/disagg.py`: --disaggregation-mode {null, prefill, decode},
    --disaggregation-transfer-backend (default mooncake; choices in `arg_groups/choices.py`:
    mooncake, nixl, ascend, fake, mori, ...), --disaggregation-bootstrap-port (default 8998,
    "Bootstrap server port on the prefill server").
  * `sglang/srt/arg_groups/pd_disaggregation_hook.py`: a decode server turns its radix cache off
    unless --disaggregation-decode-enable-radix-cache.
  * `sglang/srt/server_args.py` PortArgs.init_new: under DP attention on one node the server
    also binds port + 233 (ZMQ_TCP_PORT_DELTA, its dist-init port) and the 6 ports after it.
  * `sglang_router/router_args.py`: --pd-disaggregation, --prefill URL [BOOTSTRAP_PORT]
    (repeated; the port defaults to none, so each prefill server's is given), --decode URL
    (repeated), --host, --port, --worker-startup-timeout-secs (default 1800).
  * `docs/advanced_features/pd_disaggregation.md` (sglang main): mooncake needs
    `pip install mooncake-transfer-engine`, NIXL `pip install nixl`; the router on port 8000.
The server flags (`--host`, `--port`) and every layout flag come from `tuner.export.sglang`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.deployment import Deployment, Pool
from tuner.export import sglang
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

__all__ = ["SCRIPT", "TRANSFER_BACKEND", "export", "router_args", "server_args"]

SCRIPT = "sglang-disagg.sh"
# SGLang's default backend (fields/disagg.py), named so the script says what it relies on.
TRANSFER_BACKEND = "mooncake"
BOOTSTRAP_PORT_START = 8998  # SGLang's default bootstrap port; later prefill servers count up
# PortArgs.init_new: a DP-attention server binds port + 233 and port + 234 .. port + 239.
_DP_ATTENTION_PORTS = tuple(range(233, 240))
_SOURCE = "sglang 0.5.23 arg_groups/fields/disagg.py, sglang-router 0.3.2 router_args.py"


def _footprint(pool: Pool) -> Sequence[int]:
    return (0, *_DP_ATTENTION_PORTS) if layout(pool.config).dp > 1 else (0,)


def _plan(deployment: Deployment) -> tuple[int, list[Worker], dict[str, int]]:
    """The router's port, the workers, and each prefill server's bootstrap port."""
    plan, front, placed = place(deployment, _footprint)
    bootstrap = {w.name: plan.take(BOOTSTRAP_PORT_START) for w in placed if w.phase == "prefill"}
    return front, placed, bootstrap


def server_args(deployment: Deployment, target: ExportTarget) -> dict[str, list[str]]:
    """Worker name -> its `python -m sglang.launch_server` arguments."""
    _, placed, bootstrap = _plan(deployment)
    out: dict[str, list[str]] = {}
    for w in placed:
        args = sglang.launch_args(w.config, target.model, version=sglang.LATEST)
        args += ["--host", HOST, "--port", str(w.port), "--disaggregation-mode", w.phase]
        args += ["--disaggregation-transfer-backend", TRANSFER_BACKEND]
        if w.name in bootstrap:
            # The decode server learns the port from the router, which forwards it per request.
            args += ["--disaggregation-bootstrap-port", str(bootstrap[w.name])]
        out[w.name] = args
    return out


def router_args(deployment: Deployment) -> list[str]:
    """`python -m sglang_router.launch_router` arguments: PD mode over every worker."""
    front, placed, bootstrap = _plan(deployment)
    args = ["--pd-disaggregation"]
    for w in placed:
        if w.phase == "prefill":
            args += ["--prefill", w.url, str(bootstrap[w.name])]
        else:
            args += ["--decode", w.url]
    return [*args, "--host", HOST, "--port", str(front)]


def export(deployment: Deployment, target: ExportTarget) -> EngineExport:
    """SGLang's disaggregated launch script and caveats for `deployment`."""
    pre = pool_export("prefill", deployment.prefill.config, target)
    dec = pool_export("decode", deployment.decode.config, target)
    _, placed, bootstrap = _plan(deployment)
    servers = server_args(deployment, target)
    blocks = []
    for w in placed:
        boot = f", bootstrap port {bootstrap[w.name]}" if w.name in bootstrap else ""
        why = f"{w.phase} server {w.index}: GPUs {w.gpu_range}, {w.url}{boot}"
        argv = ["python", "-m", "sglang.launch_server", *servers[w.name]]
        blocks.append((why, background(w.env(), argv, f"{w.name}.log")))
    router = shell_join(["python", "-m", "sglang_router.launch_router", *router_args(deployment)])
    header = [f"SGLang {sglang.LATEST} prefill/decode disaggregation ({_SOURCE})"]
    notes = pooled_notes(pre.notes, dec.notes) + _notes(deployment)
    return EngineExport(
        engine="sglang",
        version=sglang.LATEST,
        command=f"sh {SCRIPT}",
        files={SCRIPT: script(header, blocks, router)},
        notes=notes,
    )


def _notes(deployment: Deployment) -> list[str]:
    notes = [
        f"--disaggregation-transfer-backend {TRANSFER_BACKEND} is SGLang's default: it needs "
        "`pip install mooncake-transfer-engine` and RDMA NICs (name them with "
        "--disaggregation-ib-device); nixl (`pip install nixl`) is the other GPU backend.",
        "the router (`pip install sglang-router`) waits up to --worker-startup-timeout-secs "
        "(1800 s) for every server to come up, then splits each request into a prefill and a "
        "decode (each prefill server's bootstrap port is given after its URL).",
        placement_note(deployment, "router"),
    ]
    if deployment.decode.config.enable_prefix_caching:
        notes.append(
            "decode servers run without the radix cache (SGLang turns it off in decode mode "
            "unless --disaggregation-decode-enable-radix-cache); prefix reuse happens on the "
            "prefill servers."
        )
    return notes
