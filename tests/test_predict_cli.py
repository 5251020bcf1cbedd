"""`tuner predict`: the JSON contract outside checks rely on, the table, and one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tuner.cli import app

pytestmark = pytest.mark.unit

runner = CliRunner()  # click >= 8.2 keeps stdout and stderr apart (output interleaves both)
BASE = ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm"]
PERCENTILE_KEYS = {"mean", "p50", "p90", "p95", "p99"}
REQUIRED = {
    "feasible", "reason", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s",
    "output_tokens_per_s_per_gpu", "total_tokens_per_s", "requests_per_s", "goodput_rps",
    "weights_gib", "kv_capacity_tokens", "max_concurrent_seqs", "preemptions",
}  # fmt: skip


def _json(args: list[str]) -> dict[str, object]:
    result = runner.invoke(app, [*BASE, *args, "--json"])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1  # exactly one JSON object, nothing else on stdout
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    return doc


def test_json_has_every_required_key_with_the_right_shape() -> None:
    doc = _json(["--isl", "512", "--osl", "64", "--concurrency", "8", "--num-requests", "32"])
    assert doc.keys() >= REQUIRED
    assert doc["feasible"] is True and doc["reason"] is None
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        value = doc[key]
        assert isinstance(value, dict) and value.keys() >= PERCENTILE_KEYS
        assert all(isinstance(v, float) for v in value.values())
    assert isinstance(doc["kv_capacity_tokens"], int) and doc["kv_capacity_tokens"] > 0
    assert doc["max_concurrent_seqs"] == 256
    assert float(doc["output_tokens_per_s"]) > 0  # type: ignore[arg-type]


def test_json_for_rate_quant_spec_and_tp_flags() -> None:
    doc = _json([
        "--rate", "4", "--num-requests", "40", "--quant", "fp8", "--kv-dtype", "fp8", "--tp", "2",
        "--spec-tokens", "3", "--draft-model", "llama-3.2-1b", "--acceptance", "0.8",
        "--prefix-cache-hit", "0.5", "--max-num-seqs", "64", "--max-batched-tokens", "4096",
    ])  # fmt: skip
    assert doc["feasible"] is True
    assert doc["config"]["tensor_parallel_size"] == 2  # type: ignore[index]
    assert doc["workload"]["rate_rps"] == 4.0  # type: ignore[index]
    assert doc["output_tokens_per_s_per_gpu"] == pytest.approx(
        float(doc["output_tokens_per_s"]) / 2  # type: ignore[arg-type]
    )


def test_json_infeasible_variant_names_the_numbers() -> None:
    result = runner.invoke(
        app, ["predict", "--model", "llama-3.1-405b", "--gpu", "h200-sxm", "--json"]
    )
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["feasible"] is False
    assert "GiB" in doc["reason"] and "weights need" in doc["reason"]
    assert doc.keys() >= REQUIRED


def test_table_output_shows_latencies_and_throughput() -> None:
    result = runner.invoke(app, [*BASE, "--concurrency", "4", "--num-requests", "8"])
    assert result.exit_code == 0, result.output
    for word in ("TTFT", "TPOT", "ITL", "E2E", "throughput", "KV capacity", "capacity meeting"):
        assert word in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--spec-tokens", "3"], "num_speculative_tokens=3 needs a draft_model"),
        (
            ["--max-batched-tokens", "64", "--max-num-seqs", "256"],
            "max_num_batched_tokens=64 < max_num_seqs=256",
        ),
        (["--gpu", "a100-80gb-sxm", "--quant", "fp8"], "fp8 weights need FP8 tensor cores"),
        (["--prefix-caching", "maybe"], "--prefix-caching 'maybe' is not one of: on, off"),
        (["--draft-model", "llama-3.2-1b"], "needs --spec-tokens"),
        (["--rate", "2", "--concurrency", "4"], "--rate 2 and --concurrency 4 are exclusive"),
        (["--quant", "int3"], "bf16, fp16, fp8, int8, int8-wo, int4-awq, int4-gptq"),
        (["--kv-dtype", "fp4"], "--kv-dtype 'fp4' is not one of: auto, fp8, int8"),
        (["--tp", "3"], "tensor_parallel_size=3 is not a power of two"),
        (["--isl", "0"], "--isl"),
        (["--acceptance", "0.5"], "--acceptance 0.5 only applies with --spec-tokens"),
        (["--spec-tokens", "9", "--draft-model", "ngram"], "--spec-tokens"),
        (["--backend", "tpu"], "--backend 'tpu' is not one of: sim, torch, vllm"),
        (["--sla", "nope"], "unknown SLA preset 'nope'"),
    ],
)
def test_bad_flags_print_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = runner.invoke(app, [*BASE, *args, "--json"])
    assert result.exit_code == 2
    text = result.stderr
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert needle in lines[0]
    assert "Traceback" not in text
    assert not result.stdout.strip()


def test_unknown_model_suggests_close_names() -> None:
    result = runner.invoke(app, ["predict", "--model", "llama-3.1-8", "--gpu", "h200-sxm"])
    assert result.exit_code == 2
    assert "llama-3.1-8b" in result.output
