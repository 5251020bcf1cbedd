"""The exporter registry: every engine declared once, and a new one is a module plus a line."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from tuner import catalog
from tuner.errors import InputError
from tuner.export import ENGINES, EXPORTERS, Exporter, exporters, get_exporter, sglang, trtllm, vllm
from tuner.export.bundle import EngineExport, ExportTarget
from tuner.export.dispatch import export_config, expressible
from tuner.export.tables import ROWS, unspelled_reason
from tuner.run_spec import build_run_spec
from tuner.specs import EngineConfig, Metrics

pytestmark = pytest.mark.unit


def test_engines_are_the_registry_in_its_order() -> None:
    assert ENGINES == tuple(EXPORTERS) == tuple(e.name for e in exporters())
    assert ENGINES == ("vllm", "sglang", "trtllm")
    names = {e.name: (e.display_name, e.script) for e in exporters()}
    assert names == {
        "vllm": ("vLLM", "vllm.sh"),
        "sglang": ("SGLang", "sglang.sh"),
        "trtllm": ("TRT-LLM", "trtllm.sh"),
    }


@pytest.mark.parametrize("name", ENGINES)
def test_each_record_matches_its_module(name: str) -> None:
    exporter = get_exporter(name)
    module = importlib.import_module(EXPORTERS[name])
    assert exporter is module.EXPORTER and exporter.export is module.export
    assert exporter.versions == tuple(module.VERSIONS) and module.LATEST in exporter.versions
    assert exporter.tables and all(table in ROWS for table in exporter.tables)
    exp = exporter.export(EngineConfig(), ExportTarget("org/model"))
    assert isinstance(exp, EngineExport) and exp.engine == name
    assert exporter.script in exp.files and exp.files[exporter.script].startswith("#!/bin/sh\n")


def test_an_unknown_engine_is_one_input_error_naming_the_known_ones() -> None:
    with pytest.raises(InputError, match="unknown engine 'tgi'; allowed: vllm, sglang, trtllm"):
        get_exporter("tgi")


def test_a_model_id_and_keywords_are_shorthand_for_a_target() -> None:
    gpu = catalog.load_gpu("mi300x")
    cfg = EngineConfig(quantization="fp8", enable_chunked_prefill=False)
    full = ExportTarget("m", gpu=gpu, max_model_len=2048, metrics=Metrics(kv_capacity_tokens=7))
    assert vllm.export(cfg, "m", gpu=gpu, max_model_len=2048) == vllm.export(cfg, full)
    assert sglang.export(cfg, "m", gpu=gpu) == sglang.export(cfg, full)
    nvidia = ExportTarget("m", metrics=Metrics(kv_capacity_tokens=7))
    assert trtllm.export(cfg, "m", metrics=nvidia.metrics) == trtllm.export(cfg, nvidia)
    assert ExportTarget.of(full, max_model_len=4096).max_model_len == 4096
    assert ExportTarget.of(full).gpu is gpu


def _echo_export(config: EngineConfig, target: ExportTarget) -> EngineExport:
    command = f"echo-serve {target.model} --max-seqs {config.max_num_seqs}"
    files = {"echo.sh": f"#!/bin/sh\nexec {command}\n"}
    return EngineExport(engine="echo", version="1", command=command, files=files)


def test_a_fourth_exporter_is_one_module_and_one_registry_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("echo_exporter")
    module.EXPORTER = Exporter(  # type: ignore[attr-defined]
        name="echo",
        display_name="Echo",
        script="echo.sh",
        versions=("1",),
        export=_echo_export,
        tables=("vllm",),  # it spells the plain knobs vLLM's rows spell
        engine="vllm",  # a second launcher of vLLM: it carries engine=vllm variants only
    )
    monkeypatch.setitem(sys.modules, "echo_exporter", module)
    monkeypatch.setitem(EXPORTERS, "echo", "echo_exporter")
    assert get_exporter("echo").display_name == "Echo"
    assert [e.name for e in exporters()][-1] == "echo"
    spec = build_run_spec(model="llama-3.1-8b", gpu="h100-sxm")
    out = export_config(EngineConfig(max_num_seqs=7), spec, engines=(*ENGINES, "echo"))
    assert list(out) == [*ENGINES, "echo"]
    echo = out["echo"]
    assert isinstance(echo, EngineExport) and echo.command.endswith("--max-seqs 7")
    assert expressible("echo", EngineConfig(), spec) is None
    assert unspelled_reason("echo", EngineConfig()) is None
    # The engine knob is the exporter's identity: an SGLang variant is not echo's to launch.
    sglang_variant = EngineConfig(engine="sglang")
    why = "this variant runs on SGLang (engine=sglang)"
    assert expressible("echo", sglang_variant, spec) == why
    assert isinstance(export_config(sglang_variant, spec)["sglang"], EngineExport)


def test_a_record_under_the_wrong_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXPORTERS, "copy", EXPORTERS["vllm"])
    with pytest.raises(TypeError, match="not the Exporter record of 'copy'"):
        get_exporter("copy")
