"""deployments.yaml: the aggregated recommendation against the disaggregated deployments searched.

Written next to best.yaml when the run compared deployments (`tuner.search.deployments`); each
option carries its pools exactly as `tuner predict --deployment` reads them back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tuner.errors import InputError
from tuner.export.disagg import export_disagg
from tuner.export.dispatch import export_target
from tuner.result_io import write_atomic
from tuner.run_spec import RunSpec
from tuner.search.deployments import DeploymentChoice, DeploymentOption, binding_text
from tuner.specs import SLA

__all__ = [
    "DEPLOYMENTS_FILE",
    "DISAGG_EXPORTS",
    "deployments_doc",
    "write_deployment_exports",
    "write_deployments",
]

DEPLOYMENTS_FILE = "deployments.yaml"
DISAGG_EXPORTS = "disagg"  # under exports/: the recommended disaggregated deployment's launch


def _pool(option: DeploymentOption, phase: str) -> dict[str, Any]:
    """One pool as `predict --deployment` reads it: workers and the layout knobs."""
    pool = getattr(option.deployment, phase)
    c = pool.config
    return {
        "workers": pool.workers,
        "tensor_parallel_size": c.tensor_parallel_size,
        "data_parallel_size": c.data_parallel_size,
        "expert_parallel": c.expert_parallel,
        "max_num_seqs": c.max_num_seqs,
        "max_num_batched_tokens": c.max_num_batched_tokens,
    }


def _option(option: DeploymentOption, sla: SLA) -> dict[str, Any]:
    pct = sla.percentile
    doc: dict[str, Any] = {
        "shape": option.deployment.shape(),
        "gpus": option.deployment.gpus,
        "capacity_rps_per_gpu": round(option.rps_per_gpu, 4),
        "estimate_rps_per_gpu": round(option.estimate_rps_per_gpu, 4),
        "prefill": _pool(option, "prefill"),
        "decode": _pool(option, "decode"),
        "binding": binding_text(option, sla),
    }
    pre, dec = option.utilisation()
    doc["prefill_pool_utilisation"] = round(pre, 3)
    doc["decode_pool_utilisation"] = round(dec, 3)
    if option.metrics is not None:
        m = option.metrics
        doc[f"ttft_ms_p{pct}"] = round(m.ttft_ms.at(pct), 2)
        doc[f"tpot_ms_p{pct}"] = round(m.tpot_ms.at(pct), 3)
        doc["handoff_link"] = m.extra.get("handoff_link")
        doc["handoff_ms_p50"] = round(float(str(m.extra.get("handoff_ms_p50", 0.0))), 3)
    return doc


def deployments_doc(choice: DeploymentChoice, sla: SLA) -> dict[str, Any]:
    """The comparison as plain data: which shape wins, by how much, and every option."""
    best = choice.best
    doc: dict[str, Any] = {
        "recommended": "disaggregated" if choice.disaggregated_wins else "aggregated",
        "aggregated_capacity_rps_per_gpu": round(choice.aggregated_rps_per_gpu, 4),
    }
    if best is not None and choice.aggregated_rps_per_gpu > 0:
        doc["disaggregated_gain"] = round(best.rps_per_gpu / choice.aggregated_rps_per_gpu - 1, 4)
    if choice.skipped:
        doc["skipped"] = choice.skipped
    doc["options"] = [_option(o, sla) for o in choice.options]
    return doc


def write_deployments(choice: DeploymentChoice, sla: SLA, path: Path) -> None:
    """Write deployments.yaml."""
    text = yaml.safe_dump(deployments_doc(choice, sla), sort_keys=False)
    write_atomic(path, "# aggregated vs disaggregated at the SLA (simulator; tuner.search."
                 "deployments)\n" + text)  # fmt: skip


def write_deployment_exports(choice: DeploymentChoice, spec: RunSpec, folder: Path) -> str | None:
    """When the disaggregated deployment wins, its engine's launch files into `folder`; the
    engine's refusal when it cannot express a pool, else None."""
    best = choice.best
    if best is None or not choice.disaggregated_wins:
        return None
    try:
        files = export_disagg(best.deployment, export_target(spec))
    except InputError as exc:
        return str(exc)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_atomic(folder / name, text)
    return None
