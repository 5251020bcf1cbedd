"""`tuner predict --deployment` and `tuner nodes`: a disaggregated prediction from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app

pytestmark = pytest.mark.unit

runner = CliRunner()
PREDICT = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "1024",
           "--osl", "64", "--rate", "4", "--num-requests", "60"]  # fmt: skip
POOLS = {"prefill": {"workers": 2, "tensor_parallel_size": 4},
         "decode": {"workers": 1, "tensor_parallel_size": 2, "max_num_seqs": 32}}  # fmt: skip


def _file(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_predict_prints_the_pools_and_the_handoff(tmp_path: Path) -> None:
    result = runner.invoke(app, [*PREDICT, "--deployment", _file(tmp_path, POOLS)])
    assert result.exit_code == 0, result.output
    assert "2P(tp4) + 1D(tp2): 8 prefill + 2 decode GPUs (10 in all)" in result.output
    assert "KV hand-off over 400 Gb/s NIC (hgx-h100)" in result.output


def test_predict_json_carries_the_deployment_and_per_gpu_rates(tmp_path: Path) -> None:
    argv = [*PREDICT, "--deployment", _file(tmp_path, POOLS), "--json"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["deployment"]["prefill"]["workers"] == 2
    assert doc["deployment"]["decode"]["config"]["max_num_seqs"] == 32
    assert doc["output_tokens_per_s_per_gpu"] == pytest.approx(doc["output_tokens_per_s"] / 10)


def test_within_one_nvlink_domain_the_handoff_rides_nvlink(tmp_path: Path) -> None:
    pools = {"prefill": {"workers": 1, "tensor_parallel_size": 4},
             "decode": {"workers": 1, "tensor_parallel_size": 4}}  # fmt: skip
    result = runner.invoke(app, [*PREDICT, "--deployment", _file(tmp_path, pools)])
    assert result.exit_code == 0, result.output
    assert "KV hand-off over NVLink" in result.output


@pytest.mark.parametrize(
    ("doc", "extra", "says"),
    [
        ({**POOLS, "prefill": {"workers": 1, "tensor_parallel_size": 3}}, [], "power of two"),
        ({**POOLS, "decode": {"workerz": 1}}, [], "decode.workerz"),
        (POOLS, ["--node", "nope"], "unknown node profile 'nope'"),
        (POOLS, ["--backend", "vllm"], "simulator"),
    ],
)
def test_bad_deployments_exit_2_with_one_line(
    tmp_path: Path, doc: object, extra: list[str], says: str
) -> None:
    result = runner.invoke(app, [*PREDICT, "--deployment", _file(tmp_path, doc), *extra])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_nodes_lists_every_profile_and_offers_json() -> None:
    result = runner.invoke(app, ["nodes", "--json"])
    assert result.exit_code == 0, result.output
    names = {n["name"] for n in json.loads(result.stdout)}
    assert {"hgx-h100", "gb200-nvl72", "gb300-nvl72"} <= names
