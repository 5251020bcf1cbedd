"""benchmarks/silicon.py: each source's rows replay the measurement protocol of that source."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import silicon  # noqa: E402

ROWS = silicon.load_rows(silicon.DEFAULT_CSV)


def _row(prefix: str, backend: str) -> dict[str, str]:
    return next(r for r in ROWS if r["id"].startswith(prefix) and r["backend"] == backend
                and r["gemm_quant_mode"] in silicon.GEMM_MODES)  # fmt: skip


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_inferencemax_rows_replay_its_scripts(backend: str) -> None:
    row = _row(silicon.INFERENCEMAX_ID_PREFIX, backend)
    users = int(float(row["batch_size"]))
    assert silicon.protocol_of(row) is silicon.INFERENCEMAX
    _, _, config, workload = silicon.row_case(row)
    # bench_serving --num-prompts 10C --random-range-ratio 0.8: 10 rounds, lengths in [0.8 L, L]
    assert workload.num_requests == 10 * users and workload.ramp_s == 0.0
    assert workload.warmup_requests == 0
    assert workload.input_tokens == pytest.approx(0.9 * int(row["isl"]), abs=1)
    assert workload.length_spread == pytest.approx(1 / 9, rel=0.01)
    if backend == "vllm":  # max-num-batched-tokens 8192, max-num-seqs C, chunked (V1)
        assert (config.max_num_batched_tokens, config.max_num_seqs) == (8192, users)
        assert config.enable_chunked_prefill
    else:  # trtllm-serve --max_num_tokens 16384, chunked prefill at its default (off)
        assert config.max_num_batched_tokens == 16384 and not config.enable_chunked_prefill


def test_aiperf_rows_keep_exact_lengths_and_20_rounds() -> None:
    row = next(r for r in ROWS if r["backend"] == "sglang")
    assert silicon.protocol_of(row) is silicon.AIPERF
    _, _, config, workload = silicon.row_case(row)
    assert workload.length_spread == 0.0 and workload.input_tokens == int(row["isl"])
    assert workload.num_requests == 20 * int(float(row["batch_size"]))
    assert config.max_num_batched_tokens == silicon.MAX_BATCHED_TOKENS


def test_engine_setup_choice_leaves_recorded_limits_alone() -> None:
    """--engine-setup replaces only limits a source did not record."""
    imx = _row(silicon.INFERENCEMAX_ID_PREFIX, "vllm")
    shared = silicon.predict_silicon_row(imx, engine_setup="shared")
    generator = silicon.predict_silicon_row(imx, engine_setup="generator")
    assert shared.predicted_ttft_ms == generator.predicted_ttft_ms


@given(st.integers(1, 20000), st.sampled_from([None, 0.5, 0.8, 0.95]))
def test_uniform_lengths_cover_the_drawn_range(length: int, ratio: float | None) -> None:
    mean, spread = silicon.uniform_lengths(length, ratio)
    low = length if ratio is None else max(1, int(length * ratio))
    assert low <= mean <= length and 0.0 <= spread < 1.0
    # mean +- spread spans [low, length] to within rounding
    assert abs(mean * (1 - spread) - low) <= 1 and abs(mean * (1 + spread) - length) <= 1


MOE_ROWS = [r for r in silicon.load_rows(silicon.DEFAULT_CSV.parent / "moe_public.csv")
            if not r.get("duplicate_of")]  # fmt: skip


def test_only_the_image_inferencemax_ran_mtp_alone_on_replays_mtp() -> None:
    def image(r: dict[str, str]) -> str:
        return silicon.source_field(r, "image")

    post3 = [r for r in MOE_ROWS if image(r).endswith(silicon.INFERENCEMAX_MTP_IMAGES)]
    assert post3 and all(r["backend"] == "trtllm" for r in post3)
    for row in post3:
        _, dp, _ = silicon.parallel_layout(row)
        _, _, config, _ = silicon.row_case(row)
        assert config.draft_model == "mtp"
        assert config.num_speculative_tokens == (1 if dp > 1 else 3)  # the script's MTP=
    # The plain configs' image, and images both configs ran, replay without speculation.
    others = [r for r in MOE_ROWS if r["backend"] == "trtllm" and image(r).endswith(
        ("release:1.2.0rc6.post2", "release:1.1.0rc2.post2"))]  # fmt: skip
    assert others and all(silicon.row_case(r)[2].draft_model is None for r in others)


def test_vllm_gpt_oss_rows_on_hopper_replay_marlin_from_the_v0_13_scripts_on() -> None:
    gpt_oss = [
        r
        for r in MOE_ROWS
        if r["backend"] == "vllm" and r["model_path"] in silicon.MXFP4_CHECKPOINTS
    ]
    kernels: dict[tuple[str, bool], set[str]] = {}
    for r in gpt_oss:
        key = (r["system"], silicon.engine_release(r["backend_version"]) >= (0, 13))
        kernels.setdefault(key, set()).add(silicon.row_case(r)[2].moe_kernel.value)
    # gptoss_fp4_h{100,200}.sh export VLLM_MXFP4_USE_MARLIN=1 since the v0.13.0 image
    assert kernels[("h200_sxm", True)] == {"marlin"} and kernels[("h100_sxm", True)] == {"marlin"}
    assert kernels[("h100_sxm", False)] == {"auto"}  # the older image: triton_kernels
    assert kernels[("b200_sxm", True)] == {"auto"}  # FlashInfer's MXFP4 kernels
