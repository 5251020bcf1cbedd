"""`tuner predict --deployment FILE`: a disaggregated deployment's prediction, printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from tuner import catalog
from tuner.cli.latency_table import latency_table
from tuner.cli.output import cell, print_table, say
from tuner.deployment import Deployment, DeploymentFile, NodeProfile
from tuner.errors import InputError
from tuner.perf.disagg import predict_disagg
from tuner.request import prediction_doc
from tuner.specs import Context, EngineConfig, Metrics
from tuner.yaml_read import load_yaml_model

__all__ = ["DeploymentPath", "NodeName", "deployment_lines", "predict_deployment"]

DeploymentPath = Annotated[
    Path | None,
    typer.Option(
        "--deployment",
        help="Disaggregated prefill/decode pools (YAML: prefill and decode, each with workers "
        "and layout changes from the variant's knobs; optional node); simulator only",
    ),
]
NodeName = Annotated[
    str | None,
    typer.Option(
        "--node",
        help="Node profile (`tuner nodes`, or a YAML path) for the network between nodes; "
        "default: the catalog node of --gpu",
    ),
]


def _node(name: str | None, ctx: Context) -> NodeProfile | None:
    """The node profile named, else the catalog's node built from the context's GPU."""
    return catalog.load_node(name) if name else catalog.node_for_gpu(ctx.gpu)


def deployment_lines(m: Metrics, deployment: Deployment) -> list[str]:
    """What a disaggregated prediction adds: the pools, the hand-off, where TTFT goes."""
    return [
        f"deployment: {deployment.shape()}: {deployment.prefill.gpus} prefill + "
        f"{deployment.decode.gpus} decode GPUs ({deployment.gpus} in all)",
        f"KV hand-off over {m.extra.get('handoff_link', '?')}: "
        f"{float(str(m.extra.get('handoff_ms_p50', 0.0))):.2f} ms P50 per prompt; prefill queue + "
        f"prefill {float(str(m.extra.get('prefill_ms_p50', 0.0))):.1f} ms P50 of TTFT "
        f"{m.ttft_ms.p50:.1f} ms (the first token comes from the decode worker)",
    ]


def predict_deployment(
    config: EngineConfig,
    ctx: Context,
    path: Path,
    node_name: str | None,
    as_json: bool,
) -> None:
    """Predict the deployment file at `path` for the variant `config` and print it."""
    spec = load_yaml_model(path, DeploymentFile)
    try:
        deployment = spec.build(config)
    except ValidationError as exc:  # a knob's rule (the engine config's own message)
        raise InputError(f"{path}: {exc.errors()[0]['msg']}") from None
    node = _node(node_name or spec.node, ctx)
    # The deployment says how many GPUs it takes; --num-gpus (tune, plan) does not apply here.
    ctx = ctx.model_copy(update={"num_gpus": max(ctx.num_gpus, deployment.gpus)})
    metrics = predict_disagg(deployment, ctx, node=node)
    if as_json:
        doc = prediction_doc(metrics, deployment.decode.config, ctx)
        doc["deployment"] = deployment.model_dump(mode="json")
        typer.echo(json.dumps(doc))
        return
    title = cell(
        f"{ctx.model.name} on {deployment.gpus}x {ctx.gpu.name} "
        f"({config.quantization.value}), disaggregated, predicted by [sim]"
    )
    if not metrics.feasible:
        say(f"{title}: infeasible: {metrics.reason or ''}")
        return
    print_table(latency_table(metrics, title))
    for line in deployment_lines(metrics, deployment):
        say(line)
    say(
        f"throughput: {metrics.output_tokens_per_s:.1f} output tok/s "
        f"({metrics.output_tokens_per_s_per_gpu:.1f} per GPU), {metrics.requests_per_s:.2f} req/s, "
        f"goodput {metrics.goodput_rps:.2f} req/s; decode KV capacity "
        f"{metrics.kv_capacity_tokens} tokens per worker, preemptions {metrics.preemptions}"
    )
