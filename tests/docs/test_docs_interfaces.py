"""docs/interfaces.md lists every public name, as docs/gen_interfaces.py generates it."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pydantic
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "interfaces.md"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    path = ROOT / "docs" / "gen_interfaces.py"
    spec = importlib.util.spec_from_file_location("gen_interfaces", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_interfaces_md_is_what_the_generator_makes(generator: ModuleType) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert generator.BEGIN in text and generator.END in text
    stale = "docs/interfaces.md is stale: run python3 docs/gen_interfaces.py"
    assert generator.render(text) == text, stale


def test_the_modules_users_import_for_failover_usage_and_telemetry_are_listed(
    generator: ModuleType,
) -> None:
    """``Upstream``, ``ModelPrice``, ``SegmentEnd`` are imported from ``fluxstream``,
    ``OpenTelemetryObserver`` from ``fluxstream.otel``: both are listed with every name they
    export."""
    listed = [name for name, _ in generator.MODULES]
    for module in ("fluxstream", "fluxstream.otel"):
        assert module in listed, module
    text = DOC.read_text(encoding="utf-8")
    for name in ("Upstream", "Failover", "ModelPrice", "UsageLedger", "OpenTelemetryObserver",
                 "instrument", "SegmentEnd", "TotalUsage", "UsageEstimate"):
        assert f"`{name}" in text, name


def test_interfaces_md_names_every_public_name_and_field(generator: ModuleType) -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = []
    for module_name, _ in generator.MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if f"`{name}`" not in text and f"`{name}(" not in text and f"`{name}:" not in text:
                missing.append(f"{module_name}.{name}")
            obj = getattr(module, name)
            if dataclasses.is_dataclass(obj) and isinstance(obj, type):
                fields = [field.name for field in dataclasses.fields(obj)]
            elif isinstance(obj, type) and issubclass(obj, pydantic.BaseModel):
                fields = list(obj.model_fields)
            else:
                fields = []
            missing += [f"{name}.{field}" for field in fields if f"`{field}:" not in text]
    assert not missing, f"not in docs/interfaces.md (run python3 docs/gen_interfaces.py): {missing}"
