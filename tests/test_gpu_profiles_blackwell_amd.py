"""Blackwell, H20 and AMD Instinct profiles: they load, keep dense peaks, and `tuner detect`
maps the names NVML and AMD SMI report to them."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from tuner import catalog, detect
from tuner.cli import app
from tuner.detect_amd import amd_market_name, amd_smi_gpus
from tuner.errors import InputError
from tuner.specs import Architecture, GPUProfile

pytestmark = pytest.mark.unit

NEW_GPUS = ["rtx-5090", "rtx-pro-6000", "b300", "gb200", "mi300x", "mi325x", "mi355x", "h20"]

# (profile, field, datasheet value): the figures each YAML's header comment derives.
DATASHEET_FIGURES = [
    ("rtx-5090", "fp16_tflops", 209.5),
    ("rtx-5090", "fp4_tflops", 1676),
    ("rtx-5090", "memory_bandwidth_gbps", 1792),
    ("rtx-pro-6000", "memory_gib", 96),
    ("rtx-pro-6000", "memory_bandwidth_gbps", 1597),
    ("b200", "fp4_tflops", 9000),
    ("b300", "fp4_tflops", 13500),
    ("b300", "fp8_tflops", 4500),
    ("gb200", "fp16_tflops", 2500),
    ("gb200", "nvlink_domain", 72),
    ("h20", "fp16_tflops", 148),
    ("h20", "memory_bandwidth_gbps", 4000),
    ("mi300x", "fp16_tflops", 1307.4),
    ("mi300x", "nvlink_gbps", 896),
    ("mi325x", "memory_gib", 256),
    ("mi355x", "fp4_tflops", 10066.3),
    ("mi355x", "nvlink_gbps", 1075.2),
]

# (reported name, memory GiB the driver reports, profile): NVML and ROCm spellings.
REPORTED_NAMES = [
    ("NVIDIA GeForce RTX 5090", 31.8, "rtx-5090"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 95.6, "rtx-pro-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 95.6, "rtx-pro-6000"),
    ("NVIDIA B300 SXM6 AC", 268.6, "b300"),
    ("NVIDIA GB200", 185.0, "gb200"),
    ("NVIDIA H20", 95.6, "h20"),
    ("NVIDIA B200", 179.1, "b200"),
    ("AMD Instinct MI300X", 192.0, "mi300x"),
    ("AMD Instinct MI300X OAM", 192.0, "mi300x"),  # rocm-smi "Card series"
    ("AMD_Instinct_MI300X", 192.0, "mi300x"),  # vLLM's ROCm device name
    ("AMD Instinct MI300X VF", 191.5, "mi300x"),  # SR-IOV guest, by the close match
    ("AMD Instinct MI325X", 256.0, "mi325x"),
    ("AMD Instinct MI325 OAM", 256.0, "mi325x"),  # amd-smi product name
    ("AMD_Instinct_MI325X", 256.0, "mi325x"),
    ("AMD Instinct MI355X", 288.0, "mi355x"),
    ("amd instinct mi355x", 288.0, "mi355x"),
]

# Close strings of other chips: their numbers differ, so they must not borrow a profile.
UNKNOWN_NAMES = [
    ("NVIDIA GB400", 277.0),
    ("AMD Instinct MI308X", 192.0),
    ("AMD Radeon RX 7900 XTX", 24.0),
    ("Matrox G200", None),
    ("", None),
]


# ----------------------------------------------------------------------------- the profiles


@pytest.mark.parametrize("name", NEW_GPUS)
def test_new_profiles_load_through_the_catalog(name: str) -> None:
    gpu = catalog.load_gpu(name)
    assert gpu.name == name and name in catalog.list_names("hardware_profiles")
    assert gpu.source.startswith("https://") and gpu.aliases
    path = catalog.data_dir("hardware_profiles") / f"{name}.yaml"
    assert path.read_text(encoding="utf-8").startswith("#"), "header comment cites the datasheet"


@pytest.mark.parametrize(("name", "field", "expected"), DATASHEET_FIGURES)
def test_datasheet_figures(name: str, field: str, expected: float) -> None:
    assert getattr(catalog.load_gpu(name), field) == pytest.approx(expected)


@pytest.mark.parametrize("gpu", catalog.all_gpus(), ids=lambda g: g.name)
def test_fp4_is_dense_and_only_where_it_exists(gpu: GPUProfile) -> None:
    if gpu.architecture in (Architecture.hopper, Architecture.ada, Architecture.cdna3):
        assert gpu.fp4_tflops == 0 and not gpu.supports_fp4
    if gpu.supports_fp4:
        assert gpu.fp4_tflops > gpu.fp8_tflops > gpu.fp16_tflops
        # Two halvings of width at most quadruple the rate; more would be a sparse figure.
        assert gpu.fp4_tflops <= 6.1 * gpu.fp8_tflops


@pytest.mark.parametrize("name", ["b200", "b300", "gb200", "rtx-5090", "rtx-pro-6000", "mi355x"])
def test_blackwell_and_cdna4_have_fp4(name: str) -> None:
    assert catalog.load_gpu(name).supports_fp4


@pytest.mark.parametrize("gpu", catalog.all_gpus(), ids=lambda g: g.name)
def test_vendor_follows_the_architecture(gpu: GPUProfile) -> None:
    amd = gpu.architecture in (Architecture.cdna3, Architecture.cdna4)
    assert gpu.vendor == ("amd" if amd else "nvidia")
    assert gpu.name.startswith("mi") == amd


@pytest.mark.parametrize("name", NEW_GPUS)
def test_scale_up_domain_matches_the_platform(name: str) -> None:
    gpu = catalog.load_gpu(name)
    if gpu.nvlink_gbps == 0:
        assert gpu.nvlink_domain == 1 and gpu.interconnect_gbps == gpu.pcie_gbps
    else:
        assert gpu.nvlink_domain == (72 if name == "gb200" else 8)


def test_profiles_json_lists_every_new_gpu_with_its_fp4_and_domain() -> None:
    result = CliRunner().invoke(app, ["profiles", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert set(NEW_GPUS) <= set(rows)
    assert rows["gb200"]["nvlink_domain"] == 72 and rows["b200"]["fp4_tflops"] == 9000


# ----------------------------------------------------------------------------- name matching


def test_aliases_stay_unique_after_normalizing() -> None:
    normal = [detect._normalized(a) for g in catalog.all_gpus() for a in g.aliases]
    assert len(normal) == len(set(normal))


@pytest.mark.parametrize(("reported", "memory", "name"), REPORTED_NAMES)
def test_reported_names_map_to_their_profile(reported: str, memory: float, name: str) -> None:
    matched = detect.match_profile(reported, memory)
    assert matched is not None and matched.name == name
    assert detect.match_profile(reported) is not None


@pytest.mark.parametrize(("reported", "memory"), UNKNOWN_NAMES)
def test_unknown_names_match_nothing(reported: str, memory: float | None) -> None:
    assert detect.match_profile(reported, memory) is None


def test_unknown_profile_name_is_still_one_clear_error() -> None:
    with pytest.raises(InputError, match="unknown GPU profile 'NVIDIA GB400'"):
        catalog.load_gpu("NVIDIA GB400")


def test_unmatched_local_gpu_still_asks_for_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = detect.DetectedGPU(index=0, name="AMD Instinct MI308X", memory_gib=192, profile=None)
    monkeypatch.setattr(detect, "detect_gpus", lambda: [gpu])
    with pytest.raises(InputError, match="matches no profile"):
        detect.local_gpu_profile("vllm")


# ----------------------------------------------------------------------------- the AMD path


@pytest.mark.parametrize(
    ("asic", "expected"),
    [
        ({"device_id": "0x74a1", "market_name": "AMD Instinct MI300X"}, "AMD Instinct MI300X"),
        ({"device_id": 0x74B5, "market_name": "N/A"}, "AMD Instinct MI300X"),  # int id, VF
        ({"device_id": "0x74B9", "market_name": "AMD Radeon Graphics"}, "AMD Instinct MI325X"),
        ({"device_id": "0x75a3", "market_name": ""}, "AMD Instinct MI355X"),
        ({"device_id": "0x1234", "market_name": " AMD Instinct MI999X "}, "AMD Instinct MI999X"),
        ({"market_name": None}, "unknown AMD GPU"),
    ],
)
def test_amd_market_name(asic: dict[str, Any], expected: str) -> None:
    assert amd_market_name(asic) == expected


def _fake_amdsmi(gpus: list[dict[str, Any]], init_error: str | None = None) -> SimpleNamespace:
    class AmdSmiException(Exception):
        """Stands in for amdsmi's exception type."""

    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if init_error:
            raise AmdSmiException(init_error)

    return SimpleNamespace(
        AmdSmiException=AmdSmiException,
        calls=calls,
        amdsmi_init=init,
        amdsmi_shut_down=lambda: calls.append("shut_down"),
        amdsmi_get_processor_handles=lambda: list(range(len(gpus))),
        amdsmi_get_gpu_asic_info=lambda h: gpus[h]["asic"],
        amdsmi_get_gpu_vram_info=lambda h: {"vram_size": gpus[h]["vram_mb"]},
    )


def test_detect_reads_amd_gpus_when_nvml_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    mi300x = {"asic": {"device_id": "0x74a1", "market_name": "AMD Instinct MI300X"},
              "vram_mb": 196592}  # fmt: skip
    mi355x = {"asic": {"device_id": "0x75a3", "market_name": "AMD Instinct MI355X"},
              "vram_mb": 294896}  # fmt: skip
    fake = _fake_amdsmi([mi300x, mi355x])
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.setattr(detect, "_nvml_gpus", lambda: "nvidia-ml-py (pynvml) is not installed")
    found = detect.detect_gpus()
    assert isinstance(found, list)
    assert [(g.profile, g.vendor, g.index) for g in found] == [
        ("mi300x", "amd", 0),
        ("mi355x", "amd", 1),
    ]
    assert found[0].memory_gib == pytest.approx(192.0, abs=0.1)
    assert fake.calls == ["init", "shut_down"]
    assert detect.local_device_count() == 2
    assert detect.local_gpu_profile("vllm")[0] == "mi300x"


def test_amd_smi_without_a_driver_adds_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", _fake_amdsmi([], init_error="no KFD"))
    monkeypatch.setattr(detect, "_nvml_gpus", lambda: "no NVIDIA driver found (NVML: x)")
    reason = detect.detect_gpus()
    assert reason == "no NVIDIA driver found (NVML: x); no AMD driver found (AMD SMI: no KFD)"


def test_without_amdsmi_the_nvml_reason_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import fails as if not installed
    assert amd_smi_gpus() is None
    monkeypatch.setattr(detect, "_nvml_gpus", lambda: "no NVIDIA driver found (NVML: x)")
    assert detect.detect_gpus() == "no NVIDIA driver found (NVML: x)"


def test_nvml_gpus_win_over_amd(monkeypatch: pytest.MonkeyPatch) -> None:
    h20 = detect.DetectedGPU(index=0, name="NVIDIA H20", memory_gib=95.6, profile="h20")
    monkeypatch.setattr(detect, "_nvml_gpus", lambda: [h20])
    monkeypatch.setattr(detect, "amd_smi_gpus", lambda: pytest.fail("AMD SMI not needed"))
    assert detect.detect_gpus() == [h20]
