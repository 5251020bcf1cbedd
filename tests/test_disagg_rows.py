"""benchmarks/data/disagg_public.csv: the carried disagg rows and their row -> Deployment map."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import disagg_rows  # noqa: E402

from tuner.specs import Engine, KVDtype, Quantization  # noqa: E402

ALL = disagg_rows.load_rows(distinct=False)
BY_ID = {r["id"]: r for r in ALL}


def test_every_disagg_row_is_carried_once() -> None:
    assert len(ALL) == 1602  # every `mode = disagg` row of aiconfigurator-core 0.12.0's sample
    assert len(BY_ID) == len(ALL)
    assert len(disagg_rows.load_rows()) == 954  # distinct measurements (duplicate_of empty)
    for row in ALL:
        assert row["source"].startswith("PyPI aiconfigurator-core"), row["id"]
        assert row["protocol"] in disagg_rows.PROTOCOLS, row["id"]
        for key in ("silicon_ttft_ms", "silicon_tpot_ms"):
            assert math.isfinite(float(row[key])) and float(row[key]) > 0, (row["id"], key)


def test_duplicates_point_at_a_kept_copy_of_the_same_measurement() -> None:
    for row in ALL:
        if row["duplicate_of"]:
            kept = BY_ID[row["duplicate_of"]]
            assert not kept["duplicate_of"], row["id"]
            for key in ("silicon_ttft_ms", "silicon_tpot_ms"):
                assert float(row[key]) == pytest.approx(float(kept[key]), rel=1e-12)
            assert (row["isl"], row["osl"], row["system"]) == (
                kept["isl"],
                kept["osl"],
                kept["system"],
            )


def test_kimi_vllm_row_keeps_both_pools_layouts() -> None:
    """1 prefill worker at TP4 + EP4, 1 decode worker at TP16 + EP16, 256 users, sa-bench 10C."""
    case = disagg_rows.row_case(BY_ID["kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c256_cfg697"])
    pre, dec = case.deployment.prefill, case.deployment.decode
    assert (pre.workers, pre.config.tensor_parallel_size, pre.config.data_parallel_size) == (
        1,
        4,
        1,
    )
    assert (dec.workers, dec.config.tensor_parallel_size, dec.config.data_parallel_size) == (
        1,
        16,
        1,
    )
    assert pre.config.expert_parallel and dec.config.expert_parallel
    assert case.deployment.gpus == 20 and case.gpu == "gb200"
    assert pre.config.quantization is Quantization.nvfp4 and pre.config.engine is Engine.vllm
    assert case.model.num_experts == 384  # Kimi-K2.5 read from its carried HF config
    wl = case.workload
    assert (wl.concurrency, wl.num_requests, wl.ramp_s, wl.warmup_requests) == (256, 2560, 0.0, 0)
    assert wl.input_tokens == pytest.approx(0.9 * 1024, abs=1)  # lengths in [0.8 L, L]


def test_deepseek_trtllm_row_maps_attention_dp_without_ep() -> None:
    """Prefill 1 x (TP1, attention DP 8, MoE TP 8), decode 4 x (TP8, MoE TP 8), FP8 weights/KV."""
    case = disagg_rows.row_case(BY_ID["dsr1_b200_trtllm_fp8_disagg_8192x1024_c128_cfg661"])
    pre, dec = case.deployment.prefill, case.deployment.decode
    assert (pre.workers, pre.config.tensor_parallel_size, pre.config.data_parallel_size) == (
        1,
        1,
        8,
    )
    assert (dec.workers, dec.config.tensor_parallel_size, dec.config.data_parallel_size) == (
        4,
        8,
        1,
    )
    assert not pre.config.expert_parallel and not dec.config.expert_parallel
    assert case.deployment.gpus == 40 and case.gpu == "b200"
    assert dec.config.quantization is Quantization.fp8 and dec.config.kv_dtype is KVDtype.fp8
    assert case.workload.concurrency == 128


def _reason(row: dict[str, str]) -> str:
    with pytest.raises(disagg_rows.NotExpressible) as info:
        disagg_rows.row_case(row)
    return str(info.value)


def test_unexpressible_rows_say_why() -> None:
    kept = {r["id"]: r for r in disagg_rows.load_rows()}
    no_workers = next(r for r in kept.values() if r["id"].startswith("2026_03_25_deepseek"))
    assert _reason(no_workers) == "pool worker counts not recorded"
    glm = next(r for r in kept.values() if r["model_path"] == "zhipuai/GLM-5")
    assert "glm_moe_dsa" in _reason(glm)
    no_users = next(
        r for r in kept.values() if "silicon_concurrency=" not in r["silicon_data_source"]
    )
    assert "concurrency" in _reason(no_users)
    hybrid = {**BY_ID["dsr1_b200_trtllm_fp8_disagg_8192x1024_c128_cfg661"]}
    hybrid.update(decode_moe_tp_size="2", decode_moe_ep_size="4")
    assert _reason(hybrid).startswith("decode pool splits experts both by TP and EP")
    piped = {**hybrid, "decode_moe_tp_size": "1", "prefill_pp_size": "2"}
    assert "pipeline" in _reason(piped)


def test_the_accuracy_page_gets_a_disaggregated_block_per_engine_and_gpu() -> None:
    import accuracy
    import accuracy_docs
    import disagg_accuracy

    rows, results = disagg_accuracy.score(limit=2)
    scored = [r for r in results if r.skipped is None]
    assert len(scored) == 2 and all(r.predicted_ttft_ms and r.predicted_tpot_ms for r in scored)
    blocks = accuracy._disagg_blocks(rows, results)
    assert [b.group for b in blocks] == ["engine", "gpu"]
    assert "workers" in blocks[0].note  # the unscored rows' reasons are named
    bands = accuracy_docs.ValidationBands.model_validate_json(accuracy.DEFAULT_BANDS.read_text())
    page = accuracy_docs.render({}, blocks, bands, "today")
    assert "## Disaggregated block" in page and "| gpu | rows |" in page
