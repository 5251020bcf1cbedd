"""torch.compile of the engine step: same logits and tokens as the eager step."""

from __future__ import annotations

import pytest
import torch
from _engine_fixtures import prompts, tiny_model, tiny_spec

from tuner.backends import get_backend
from tuner.catalog import load_gpu, load_sla
from tuner.engine.compile import compile_available
from tuner.engine.generate import Engine, EngineLimits, run_to_completion
from tuner.engine.quantize import quantize_model
from tuner.specs import Context, EngineConfig, Workload

_OK, _WHY = compile_available()
pytestmark = pytest.mark.skipif(not _OK, reason=_WHY or "torch.compile unavailable")

# bf16 logits of the tiny model are O(10); compiled kernels reorder reductions and may fuse
# the dequantization differently, so they agree to bf16 rounding, not bitwise.
_LOGIT_ATOL = 0.25


def _logits_of_steps(engine: Engine, lengths: list[int], steps: int) -> list[torch.Tensor]:
    """Logits of every row each step samples from: prefill, then `steps` batched decodes."""
    captured: list[torch.Tensor] = []
    original = engine._sample

    def capture(logits: torch.Tensor) -> list[int]:
        captured.append(logits.detach().clone())
        return original(logits)

    engine._sample = capture  # type: ignore[method-assign]
    for p in prompts(lengths, seed=3):
        engine.add_request(p, steps)
    while engine.has_work:
        engine.step()
    return captured


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["bf16-F.linear", "int8-wo"])
def test_compiled_step_matches_eager(quant: str) -> None:
    """Prefill + decode at batch 1 and 3 (dynamic shapes): logits within _LOGIT_ATOL of eager."""
    torch.manual_seed(0)
    model = tiny_model(dtype=torch.bfloat16)
    if quant == "int8-wo":
        quantize_model(model, "int8-wo")
    limits = EngineLimits(max_num_seqs=3, max_num_batched_tokens=64, num_blocks=32, block_size=16)
    for lengths in ([9], [5, 17, 12]):
        eager = _logits_of_steps(Engine(model, limits), lengths, 4)
        compiled = _logits_of_steps(Engine(model, limits, compile=True), lengths, 4)
        assert len(eager) == len(compiled) > 0
        for e, c in zip(eager, compiled, strict=True):
            assert e.shape == c.shape
            torch.testing.assert_close(c, e, atol=_LOGIT_ATOL, rtol=0.0)


@pytest.mark.slow
def test_compiled_greedy_tokens_equal_eager() -> None:
    """Greedy generation through the compiled step emits the eager tokens."""
    model = tiny_model(dtype=torch.float32)
    limits = EngineLimits(max_num_seqs=2, max_num_batched_tokens=64, num_blocks=16, block_size=16)
    ps = prompts([7, 11], seed=5)
    eager = run_to_completion(Engine(model, limits), ps, 6)
    compiled = run_to_completion(Engine(model, limits, compile=True), ps, 6)
    assert compiled == eager


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["bf16", "int8-wo"])
def test_torch_backend_compile_records_compile_time(quant: str) -> None:
    """TorchBackend(compile=True) measures the workload and reports compile_s apart from it."""
    ctx = Context(
        model=tiny_spec(name="tiny-compile"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla("chat"),
        workload=Workload(input_tokens=24, output_tokens=6, concurrency=2, num_requests=4),
    )
    config = EngineConfig(quantization=quant, max_num_seqs=2, max_num_batched_tokens=32)
    m = get_backend("torch", seed=1, compile=True).evaluate(config, ctx)
    assert m.feasible, m.reason
    assert m.extra["compile"] is True
    assert float(m.extra["compile_s"]) > 0  # type: ignore[arg-type]
    assert m.num_requests == 4 and m.failed_requests == 0
