"""Aggregated vs disaggregated: the deployment search around a recommended variant."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner import catalog
from tuner.cli import app
from tuner.deployment import DeploymentFile
from tuner.perf.disagg import predict_disagg
from tuner.plan import PlanRequest, load_prices, plan
from tuner.plan.models import DisaggOption
from tuner.run.deployment_out import deployments_doc
from tuner.search.deployments import binding_text, compare_deployments, worker_layouts
from tuner.specs import SLA, Context, EngineConfig, Workload

pytestmark = pytest.mark.unit

WL = Workload(input_tokens=2048, output_tokens=256)


def _ctx(model: str, gpu: str, num_gpus: int) -> Context:
    return Context(model=catalog.load_model(model), gpu=catalog.load_gpu(gpu),
                   sla=SLA(ttft_ms=500, tpot_ms=40), workload=WL, num_gpus=num_gpus)  # fmt: skip


def test_worker_layouts_stay_inside_one_domain_and_fit() -> None:
    ctx = _ctx("deepseek-r1", "h200-sxm", 32)
    layouts = worker_layouts(EngineConfig(quantization="fp8-block", expert_parallel=True), ctx)
    assert layouts
    for c in layouts:
        gpus = c.tensor_parallel_size * c.data_parallel_size
        assert gpus <= ctx.gpu.nvlink_domain
        assert gpus == 8  # 671B parameters in FP8 need all eight 141 GB GPUs of the node


def test_the_search_keeps_within_the_gpus_and_ranks_best_first() -> None:
    ctx = _ctx("llama-3.1-8b", "h100-sxm", 16)
    choice = compare_deployments(EngineConfig(max_num_seqs=128), ctx, catalog.load_node("hgx-h100"))
    assert choice.aggregated_rps_per_gpu > 0
    assert choice.options, choice.skipped
    rates = [o.rps_per_gpu for o in choice.options]
    assert rates == sorted(rates, reverse=True)
    for o in choice.options:
        assert o.deployment.gpus <= 16
        assert o.metrics is None or o.metrics.feasible
    assert choice.disaggregated_wins == (rates[0] > choice.aggregated_rps_per_gpu)


def test_a_written_option_predicts_back_the_same_deployment() -> None:
    ctx = _ctx("llama-3.1-8b", "h100-sxm", 16)
    base = EngineConfig(max_num_seqs=128)
    choice = compare_deployments(base, ctx, catalog.load_node("hgx-h100"))
    doc = deployments_doc(choice, ctx.sla)
    assert doc["recommended"] in ("aggregated", "disaggregated")
    top = yaml.safe_load(yaml.safe_dump(doc))["options"][0]
    built = DeploymentFile(prefill=top["prefill"], decode=top["decode"]).build(base)
    assert built == choice.options[0].deployment
    m = predict_disagg(built, ctx, node=catalog.load_node("hgx-h100"))
    assert m.feasible
    assert binding_text(choice.options[0], ctx.sla)


def test_too_few_gpus_for_two_workers_is_said_not_searched() -> None:
    ctx = _ctx("deepseek-r1", "h200-sxm", 8)
    choice = compare_deployments(EngineConfig(quantization="fp8-block", expert_parallel=True),
                                 ctx, None, aggregated_rps_per_gpu=1.0)  # fmt: skip
    assert choice.options == [] and not choice.disaggregated_wins
    assert choice.skipped and "--num-gpus 8" in choice.skipped


def test_a_plan_prices_the_disaggregated_shape_next_to_the_aggregated_one() -> None:
    req = PlanRequest(
        model=catalog.load_model("llama-3.1-8b"), sla=catalog.load_sla("chat"),
        workload=Workload(input_tokens=2048, output_tokens=128, num_requests=60),
        space=catalog.load_search_space("default"), rate_rps=30.0,
        gpus=[catalog.load_gpu("h100-sxm")],
    )  # fmt: skip
    result = plan(req, load_prices())
    kind = result.kinds[0]
    assert kind.status == "ok" and kind.best is not None
    d = kind.disaggregated
    assert isinstance(d, DisaggOption), d
    assert d.gpus == d.units * d.deployment.gpus
    assert d.units * d.capacity_rps_per_unit >= req.rate_rps
    assert d.usd_per_hour is not None and kind.best.usd_per_hour is not None
    assert d.cheaper == (d.usd_per_hour < kind.best.usd_per_hour)


def test_a_tune_writes_the_comparison_its_report_and_the_winners_launch(tmp_path: Path) -> None:
    run = tmp_path / "run"
    argv = ["tune", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-gpus", "16",
            "--sla", "chat", "--trials", "8", "--isl", "2048", "--osl", "128",
            "--run-dir", str(run)]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load((run / "deployments.yaml").read_text())
    assert doc["recommended"] in ("aggregated", "disaggregated")
    assert doc["options"] and all(o["gpus"] <= 16 for o in doc["options"])
    assert "disaggregated" in result.output
    assert "Aggregated or disaggregated" in (run / "report.html").read_text()
    launch = run / "exports" / "disagg"
    assert launch.is_dir() == (doc["recommended"] == "disaggregated")
