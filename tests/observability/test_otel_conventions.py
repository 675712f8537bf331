"""Every ``gen_ai.*``, ``server.*`` and ``error.*`` name ``fluxstream.otel`` writes (itself
or through ``fluxstream._core.genai_attributes``, which reads them from requests and replies)
is one the ``opentelemetry-semantic-conventions`` package publishes (attributes and metrics):
checked, not guessed. The conventions' own names only; fluxstream's are under ``fluxstream.*``."""

from __future__ import annotations

import ast
import inspect

import pytest

gen_ai_attributes = pytest.importorskip(
    "opentelemetry.semconv._incubating.attributes.gen_ai_attributes"
)
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics  # noqa: E402
from opentelemetry.semconv.attributes import error_attributes, server_attributes  # noqa: E402

import fluxstream._core.genai_attributes  # noqa: E402
import fluxstream.otel  # noqa: E402
from fluxstream import apis  # noqa: E402


def published(*modules: object) -> set[str]:
    return {v for m in modules for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}


def names_in_otel() -> set[str]:
    """Every string literal of the modules that looks like a conventions' name."""
    trees = [ast.parse(inspect.getsource(module))
             for module in (fluxstream.otel, fluxstream._core.genai_attributes)]
    return {
        node.value for tree in trees for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and node.value.startswith(("gen_ai.", "server.", "error."))
        and " " not in node.value
    }


def test_every_conventions_name_written_is_published() -> None:
    names = names_in_otel()
    assert {"gen_ai.operation.name", "gen_ai.usage.output_tokens", "server.port",
            "error.type", "gen_ai.client.operation.time_to_first_chunk"} <= names
    known = published(gen_ai_attributes, gen_ai_metrics, error_attributes, server_attributes)
    assert names - known == set()


def test_the_operation_and_providers_are_the_conventions_values() -> None:
    assert gen_ai_attributes.GenAiOperationNameValues.CHAT.value == fluxstream.otel.OPERATION
    providers = {v.value for v in gen_ai_attributes.GenAiProviderNameValues}
    assert {api.provider for api in apis.registered()} <= providers
    operations = {v.value for v in gen_ai_attributes.GenAiOperationNameValues}
    assert {api.operation for api in apis.registered()} <= operations
    assert apis.get("gemini").operation == "generate_content"
