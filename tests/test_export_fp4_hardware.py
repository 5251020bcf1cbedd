"""Exporters refuse what an engine cannot run on the target GPU, and say why in one line."""

from __future__ import annotations

import pytest

from tuner import catalog
from tuner.errors import InputError
from tuner.export import sglang, trtllm, vllm
from tuner.specs import EngineConfig

pytestmark = pytest.mark.unit

NVFP4 = EngineConfig(quantization="nvfp4", tensor_parallel_size=8)


@pytest.mark.parametrize("engine", [sglang, trtllm], ids=["sglang", "trtllm"])
def test_nvfp4_without_fp4_tensor_cores_is_refused_by_engines_without_a_fallback(engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="nvfp4 only on GPUs with FP4 tensor cores.*h200-sxm"):
        engine.export(NVFP4, "nvidia/DeepSeek-R1-FP4", gpu=catalog.load_gpu("h200-sxm"))
    assert engine.export(NVFP4, "nvidia/DeepSeek-R1-FP4", gpu=catalog.load_gpu("b200")).command


def test_vllm_keeps_its_weight_only_fp4_path_on_hopper() -> None:
    exp = vllm.export(NVFP4, "nvidia/DeepSeek-R1-FP4", gpu=catalog.load_gpu("h200-sxm"))
    assert "--quantization modelopt_fp4" in exp.command


def test_trtllm_refuses_amd_and_names_the_engines_that_run_there() -> None:
    with pytest.raises(InputError, match="NVIDIA GPUs only.*vLLM or SGLang on ROCm"):
        trtllm.export(EngineConfig(quantization="fp8"), "m", gpu=catalog.load_gpu("mi300x"))
    notes = vllm.export(EngineConfig(quantization="fp8"), "m", gpu=catalog.load_gpu("mi300x")).notes
    assert any("e4m3fnuz" in n for n in notes)
    notes = vllm.export(EngineConfig(quantization="fp8"), "m", gpu=catalog.load_gpu("mi355x")).notes
    assert any("OCP e4m3" in n for n in notes)
