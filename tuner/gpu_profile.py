"""A GPU's datasheet: its architecture and the numbers the performance model reads."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from tuner.calibration_schema import Calibration
from tuner.knobs.models import Strict as _Strict
from tuner.model_spec import Name

__all__ = ["Architecture", "GPUProfile"]


class Architecture(str, Enum):
    """GPU micro-architecture generation; decides which tensor-core dtypes exist."""

    ampere = "ampere"
    ada = "ada"
    hopper = "hopper"
    blackwell = "blackwell"
    cdna3 = "cdna3"  # AMD Instinct MI300X / MI325X
    cdna4 = "cdna4"  # AMD Instinct MI350X / MI355X
    cpu = "cpu"  # a host CPU measured by `tuner.detect_cpu`, not a datasheet GPU


class GPUProfile(_Strict):
    """One GPU model's datasheet numbers (dense tensor-core peaks, not sparse)."""

    name: Name = Field(description="Catalog name, e.g. h200-sxm")
    display_name: Name = Field(description="Vendor's product name")
    aliases: list[Name] = Field(default_factory=list, description="Names NVML reports")
    architecture: Architecture
    compute_capability: float | None = Field(
        default=None,
        ge=0,
        description="CUDA compute capability (10.0 B200, 12.0 RTX PRO 6000); None = not recorded",
    )
    sm_count: int = Field(gt=0)
    memory_gib: float = Field(gt=0, description="Device memory as marketed (GB ~ GiB for HBM)")
    memory_bandwidth_gbps: float = Field(gt=0, description="Peak DRAM bandwidth, GB/s")
    fp16_tflops: float = Field(gt=0, description="Dense FP16/BF16 tensor TFLOPS")
    fp8_tflops: float = Field(ge=0, description="Dense FP8 tensor TFLOPS; 0 = unsupported")
    int8_tops: float = Field(ge=0, description="Dense INT8 tensor TOPS")
    int4_tops: float = Field(ge=0, description="Dense INT4 tensor TOPS; 0 = unsupported")
    fp4_tflops: float = Field(
        default=0.0, ge=0, description="Dense FP4 (NVFP4/MXFP4) tensor TFLOPS; 0 = unsupported"
    )
    l2_mib: float = Field(gt=0)
    nvlink_gbps: float = Field(
        ge=0, description="Scale-up link per GPU (NVLink / Infinity Fabric), GB/s total; 0 = none"
    )
    nvlink_domain: int = Field(
        default=8, ge=1, description="GPUs one scale-up link domain joins (8 HGX, 72 NVL72)"
    )
    pcie_gbps: float = Field(gt=0, description="PCIe bandwidth per direction, GB/s")
    tdp_w: float = Field(ge=0, description="Board power, W; 0 = unknown (no energy estimate)")
    source: str = Field(min_length=8, description="Datasheet URL")
    calibration: Calibration | None = Field(
        default=None, description="Fitted by `tuner calibrate` on this device; None = datasheet"
    )

    @property
    def supports_fp8(self) -> bool:
        """Whether FP8 tensor-core math exists on this GPU."""
        return self.fp8_tflops > 0

    @property
    def supports_fp4(self) -> bool:
        """Whether FP4 tensor-core math exists (Blackwell, CDNA4)."""
        return self.fp4_tflops > 0

    @property
    def vendor(self) -> str:
        """Who makes it: decides the engine build (CUDA or ROCm) and FP8 naming."""
        return "amd" if self.architecture in (Architecture.cdna3, Architecture.cdna4) else "nvidia"

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes."""
        return self.memory_gib * 1024**3

    @property
    def interconnect_gbps(self) -> float:
        """Bandwidth available to tensor-parallel collectives: NVLink when present, else PCIe."""
        return self.nvlink_gbps if self.nvlink_gbps > 0 else self.pcie_gbps
