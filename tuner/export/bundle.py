"""What an exporter produces: files to write, the launch command, and caveats for the user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tuner.errors import printable
from tuner.export.measured_launch import MeasuredLaunch
from tuner.model_spec import check_model_id
from tuner.specs import Architecture, GPUProfile, Metrics, Quantization

__all__ = [
    "EngineExport",
    "ExportTarget",
    "amd_fp8_note",
    "comment",
    "draft_source",
    "native_fp4_refusal",
    "option_settings",
    "shell_join",
]


@dataclass(frozen=True)
class ExportTarget:
    """What a variant is exported for, the same for every engine: the model to serve, the GPU
    (ROCm spellings, FP4 refusals), the workload's served max-model-len (None: unknown) and the
    variant's predicted metrics (TensorRT-LLM caps its KV pool at the simulated capacity);
    `launch`: how a measuring backend started that engine (its export repeats it)."""

    model: str
    gpu: GPUProfile | None = None
    max_model_len: int | None = None
    metrics: Metrics | None = None
    launch: MeasuredLaunch | None = None

    def __post_init__(self) -> None:
        # The exporters' entry, whatever way the id came (a flag, run.yaml, a config.json's
        # _name_or_path): it is written into scripts and YAML comments, where a newline would
        # start a line of its own and a leading '-' would read as an option.
        check_model_id(self.model, "model id")

    @classmethod
    def of(
        cls,
        target: ExportTarget | str,
        *,
        gpu: GPUProfile | None = None,
        max_model_len: int | None = None,
        metrics: Metrics | None = None,
    ) -> ExportTarget:
        """`target` itself, a bare model id as a target, with any keyword given set on it."""
        base = cls(target) if isinstance(target, str) else target
        return replace(
            base,
            gpu=base.gpu if gpu is None else gpu,
            max_model_len=base.max_model_len if max_model_len is None else max_model_len,
            metrics=base.metrics if metrics is None else metrics,
        )


@dataclass(frozen=True)
class EngineExport:
    """One engine's launch recipe for one EngineConfig."""

    engine: str
    version: str
    command: str
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def readme(self) -> str:
        """Plain-text summary: the command, then each caveat on its own line."""
        lines = [f"# {self.engine} {self.version}", "", self.command, ""]
        lines += [f"NOTE: {n}" for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"


def shell_join(argv: list[str]) -> str:
    """A copy-pasteable shell command line, one `--flag value` pair per continued line."""
    import shlex

    parts: list[str] = []
    for token in argv:
        quoted = shlex.quote(token)
        if token.startswith("--") or not parts:
            parts.append(quoted)
        else:
            parts[-1] = f"{parts[-1]} {quoted}"
    return " \\\n    ".join(parts)


def comment(text: str) -> str:
    """One `# text` line of a launch file: a control character in `text` is written escaped,
    so no part of it can leave the comment (the names are refused earlier; this is the floor)."""
    return f"# {printable(text)}\n"


def option_settings(argv: Sequence[str]) -> set[str]:
    """The settings an argument list gives: each `--flag` (`--flag=value` too) once, a negated
    `--no-flag` as `--flag`, since both set the same thing."""
    flags = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    return {"--" + f.removeprefix("--").removeprefix("no-") for f in flags}


def draft_source(draft_model: str) -> str:
    """A draft named in the catalog is served from its Hugging Face id; anything else is a path."""
    from tuner.catalog import list_names, load_model

    if draft_model in list_names("models"):
        return load_model(draft_model).hf_id or draft_model
    return draft_model


def amd_fp8_note(engine: str, gpu: GPUProfile | None) -> str | None:
    """Which FP8 encoding a ROCm build runs on this AMD GPU, or None off AMD (or GPU unknown)."""
    # vLLM's and SGLang's is_fp8_fnuz() test for gfx94x: CDNA3 has no OCP FP8 (HIP fp8 docs).
    if gpu is None or gpu.vendor != "amd":
        return None
    if gpu.architecture is Architecture.cdna3:
        return (
            f"{gpu.name} (CDNA3, gfx94x): {engine} on ROCm runs FP8 as e4m3fnuz and converts "
            "OCP e4m3 checkpoints at load (weights re-encoded, scales doubled); no other "
            "checkpoint is needed."
        )
    return (
        f"{gpu.name} (CDNA4, gfx950): {engine} on ROCm runs FP8 as OCP e4m3 (e4m3fn), "
        "the encoding NVIDIA checkpoints ship; they load unchanged."
    )


def native_fp4_refusal(engine: str, quant: Quantization, gpu: GPUProfile | None) -> str | None:
    """Why an engine without an FP4 fallback cannot serve nvfp4 on `gpu`, or None when it can."""
    # SGLang's ModelOptFp4Config and TensorRT-LLM's NVFP4 kernels need SM100+ (Blackwell FP4
    # tensor cores); only vLLM has a weight-only (Marlin) path for older GPUs.
    if quant is not Quantization.nvfp4 or gpu is None or gpu.supports_fp4:
        return None
    return (
        f"{engine} runs nvfp4 only on GPUs with FP4 tensor cores (Blackwell); {gpu.name} has "
        "none: use vLLM (weight-only FP4 fallback) or an fp8 / int4 checkpoint"
    )
