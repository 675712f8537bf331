"""Pure tests of the server's deterministic scripts, profiles and fault parsing (no sockets)."""

from __future__ import annotations

import json

import pytest
from test_server_support import TOOLS, Event, accumulate, assert_matches, chat

from fluxstream.server import (
    PROFILE_NAMES,
    FaultError,
    ProfileError,
    build_faults,
    build_script,
    expected_reply,
    parse_fault_spec,
    parse_profiles,
)
from fluxstream.server.render import frame, split_json, stream_events


def events_of(body: dict[str, object], profiles: str = "openai") -> list[Event]:
    names = parse_profiles(profiles)
    script = build_script(body, names)
    opts = body.get("stream_options")
    usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
    return [Event(data=e.data, id=str(e.seq)) for e in stream_events(script, names, usage)]


def test_same_request_same_script() -> None:
    assert build_script(chat()) == build_script(chat())
    assert build_script(chat("a")) != build_script(chat("b"))


def test_key_order_and_stream_flag_do_not_change_the_reply() -> None:
    body = chat()
    reordered = dict(reversed(list(body.items())))
    assert build_script(body) == build_script(reordered)
    assert build_script(body).id == build_script({**body, "stream": False}).id


def test_text_is_multibyte_and_has_default_deltas() -> None:
    script = build_script(chat())
    (choice,) = script.choices
    assert len(choice.text_deltas) == 30
    for needle in ("é", "你好", "👋🏽", '"', "\\", "\n"):
        assert needle in choice.text
    # a short natural answer that ends where a sentence ends, not prompt words mixed with tokens
    assert choice.text.startswith("Hello") and choice.text.endswith(" in order.")
    assert "Hello there" not in choice.text  # the prompt is answered, not echoed
    assert choice.finish_reason == "stop"


def test_a_filled_reply_goes_on_and_a_shorter_one_is_cut() -> None:
    answer = build_script(chat()).choices[0].text_deltas
    assert build_script(chat(max_tokens=100)).choices[0].text_deltas == answer
    longer = build_script(chat(max_tokens=100), "fill-max-tokens").choices[0].text_deltas
    assert longer[:30] == answer and len(longer) == 100 and "".join(longer[30:]).strip()
    assert build_script(chat(max_tokens=9)).choices[0].text_deltas == answer[:9]


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_sets_the_number_of_deltas(key: str) -> None:
    assert len(build_script(chat(**{key: 7})).choices[0].text_deltas) == 7
    assert len(build_script(chat(**{key: 1})).choices[0].text_deltas) == 1


def test_n_choices_differ() -> None:
    script = build_script(chat(n=3))
    texts = [c.text for c in script.choices]
    assert len(set(texts)) == 3


def test_reasoning_by_profile_or_param() -> None:
    assert build_script(chat()).choices[0].reasoning_deltas == ()
    assert build_script(chat(), "reasoning").choices[0].reasoning_deltas
    assert build_script(chat(reasoning_effort="low")).choices[0].reasoning_deltas
    assert not build_script(chat(reasoning_effort="none")).choices[0].reasoning_deltas


def test_tool_calls_are_interleaved_fragments_of_valid_json() -> None:
    script = build_script(chat(tools=TOOLS))
    (choice,) = script.choices
    assert [c.name for c in choice.tool_calls] == ["get_weather", "search", "clock"]
    assert choice.text_deltas == () and choice.finish_reason == "tool_calls"
    weather = json.loads(choice.tool_calls[0].arguments)
    assert set(weather) == {"city", "unit", "days"} and weather["unit"] in ("c", "f")
    order = [index for index, _ in choice.tool_fragments]
    assert order[:3] == [0, 1, 2]  # interleaved, not call after call
    for call in choice.tool_calls:
        joined = "".join(f for i, f in choice.tool_fragments if i == call.index)
        assert joined == call.arguments
    assert (
        len(build_script(chat(tools=TOOLS, parallel_tool_calls=False)).choices[0].tool_calls) == 1
    )
    assert build_script(chat(tools=TOOLS, tool_choice="none")).choices[0].tool_calls == ()


def test_usage_counts() -> None:
    usage = build_script(chat(max_tokens=5)).usage
    assert usage["completion_tokens"] == 5
    assert usage["prompt_tokens"] == 2 + 2 + 3  # two messages + their words
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5


@pytest.mark.parametrize("profile", [p for p in PROFILE_NAMES if p != "json"])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"n": 2, "stream_options": {"include_usage": True}},
        {"tools": TOOLS},
        {"tools": TOOLS, "n": 2, "reasoning_effort": "high"},
    ],
    ids=["text", "n2-usage", "tools", "tools-n2-reasoning"],
)
def test_stream_events_assemble_to_expected_reply(profile: str, extra: dict[str, object]) -> None:
    body = chat(**extra)
    assert_matches(accumulate(events_of(body, profile)), expected_reply(body, profile))


def test_events_are_numbered_and_end_with_done() -> None:
    events = events_of(chat(max_tokens=4))
    assert [e.id for e in events] == [str(i) for i in range(1, len(events) + 1)]
    assert events[-1].data == "[DONE]"
    assert len(events) == 1 + 4 + 1 + 1  # role, deltas, finish, DONE


def test_split_json_keeps_value() -> None:
    for event in events_of(chat(tools=TOOLS, n=2, stream_options={"include_usage": True})):
        assert event.data is not None
        if event.data == "[DONE]":
            continue
        pieces = split_json(event.data)
        assert len(pieces) > 1
        assert json.loads("\n".join(pieces)) == json.loads(event.data)


def test_frame_variants() -> None:
    from fluxstream.server.render import WireEvent

    event = WireEvent(3, '{"a":1,"b":[1,2,3],"c":{"d":"x,y:z"}}')
    assert frame(event, frozenset()) == b'id: 3\ndata: {"a":1,"b":[1,2,3],"c":{"d":"x,y:z"}}\n\n'
    assert frame(event, frozenset({"nospace"})).startswith(b"id:3\ndata:{")
    assert frame(event, frozenset({"crlf"}), retry=50).startswith(b"id: 3\r\nretry: 50\r\n")
    assert frame(event, frozenset({"crlf"})).endswith(b"\r\n\r\n")
    assert frame(event, frozenset({"multiline"})).count(b"data: ") > 1


def test_parse_profiles() -> None:
    assert parse_profiles("openai") == frozenset()
    assert parse_profiles("azure, crlf+nospace") == {"azure", "crlf", "nospace"}
    with pytest.raises(ProfileError):
        parse_profiles("nope")


def test_parse_faults() -> None:
    faults = build_faults(parse_fault_spec("write-size=1,drop_after=10,stall=0.5,status-body=html"))
    assert (faults.write_size, faults.drop_after, faults.stall) == (1, 10, 0.5)
    assert faults.status_body == "html"
    assert build_faults(parse_fault_spec("fail-first=2")).status == 503
    for bad in ("nope=1", "write-size=0", "stall=x", "status=99", "justakey"):
        with pytest.raises(FaultError):
            build_faults(parse_fault_spec(bad))


def test_expected_reply_for_error_midstream() -> None:
    body = chat(max_tokens=10)
    expected = expected_reply(body, "error-midstream")
    full = expected_reply(body)
    assert expected.text == full.text[: len(expected.text)] and len(expected.text) < len(full.text)
    assert expected.error is not None and expected.choices[0].finish_reason is None
    assert not expected.done
    assert expected_reply(body, "error-midstream-done").done


def test_expected_reply_honours_model_suffix() -> None:
    body = chat(model="m@reasoning,no-done")
    expected = expected_reply(body)
    assert expected.choices[0].reasoning and not expected.done and expected.model == "m"


def _server_imports() -> dict[str, set[str]]:
    """``module -> server modules it imports`` for every module of ``fluxstream/server``,
    counting imports inside functions too (a local import is still an edge of the graph)."""
    import ast
    from pathlib import Path

    import fluxstream.server

    root = Path(fluxstream.server.__file__).parent
    names = {p.stem for p in root.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for name in sorted(names):
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                target = (node.module or "").split(".")[0]
                edges |= {target} if target else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[:2] == ["fluxstream", "server"] and len(parts) > 2:
                    edges.add(parts[2])
        graph[name] = edges & names
    return graph


def test_server_modules_import_one_way() -> None:
    """No cycle among the server's modules: content (the script) never depends on how it
    is rendered, so the expected reply is a function of the script alone."""
    graph = _server_imports()
    assert "render" in graph["app"] and "script" in graph["render"]
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())
