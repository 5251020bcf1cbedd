"""Detect local AMD Instinct GPUs through AMD SMI (the optional `amdsmi` package)."""

from __future__ import annotations

from typing import Any

__all__ = ["AMD_PCI_DEVICE_NAMES", "amd_market_name", "amd_smi_gpus"]

# PCI device id -> product, for guests whose AMD SMI reports no usable market name (SR-IOV VFs
# often say "N/A" or a generic "AMD Radeon Graphics"). Same ids vLLM's ROCm platform maps.
AMD_PCI_DEVICE_NAMES = {
    "0x74a1": "AMD Instinct MI300X",
    "0x74b5": "AMD Instinct MI300X",  # virtual function
    "0x74a5": "AMD Instinct MI325X",
    "0x74b9": "AMD Instinct MI325X",  # virtual function
    "0x75a3": "AMD Instinct MI355X",
    "0x75b3": "AMD Instinct MI355X",  # virtual function
}


def amd_market_name(asic_info: dict[str, Any]) -> str:
    """The product name of one GPU from `amdsmi_get_gpu_asic_info`: known PCI id, else market."""
    device_id = asic_info.get("device_id")
    # Older amdsmi returns the id as an int, newer as a "0x74a1" string.
    key = f"0x{device_id:04x}" if isinstance(device_id, int) else str(device_id or "").lower()
    if key in AMD_PCI_DEVICE_NAMES:
        return AMD_PCI_DEVICE_NAMES[key]
    return str(asic_info.get("market_name") or key or "unknown AMD GPU").strip()


def amd_smi_gpus() -> list[tuple[str, float]] | str | None:
    """(name, memory GiB) of every GPU AMD SMI sees, a one-line reason when it cannot read them,
    or None when `amdsmi` is not installed (no AMD stack here: nothing to report)."""
    try:
        import amdsmi  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    error = getattr(amdsmi, "AmdSmiException", Exception)
    try:
        amdsmi.amdsmi_init()
    except error as exc:
        return f"no AMD driver found (AMD SMI: {exc})"
    try:
        found = []
        for handle in amdsmi.amdsmi_get_processor_handles():
            name = amd_market_name(amdsmi.amdsmi_get_gpu_asic_info(handle))
            vram_mib = float(amdsmi.amdsmi_get_gpu_vram_info(handle)["vram_size"])
            found.append((name, vram_mib / 1024))
        return found
    except error as exc:
        return f"AMD SMI could not read the GPUs ({exc})"
    finally:
        amdsmi.amdsmi_shut_down()
