"""``help(fluxstream.AsyncClient)`` shows what a new user needs: the three endpoints and
readable defaults.

The endpoints were plain instance attributes set in ``__init__``, which pydoc does not see;
the ``timeout`` default (a "not given" sentinel) rendered as ``<..._Unset object at 0x...>``.
"""

from __future__ import annotations

import pydoc
import re

import fluxstream


def rendered() -> str:
    return pydoc.render_doc(fluxstream.AsyncClient, renderer=pydoc.plaintext)


def test_help_shows_each_endpoint_with_its_docstring() -> None:
    text = rendered()
    for name, words in (
        ("chat", "Chat Completions"),
        ("responses", "Responses API"),
        ("messages", "Anthropic Messages"),
    ):
        # pydoc writes a documented attribute as its name on a line, then its docstring.
        found = re.search(rf"^ \|  {name}\n \|      (.+)$", text, re.MULTILINE)
        assert found is not None, f"{name} is not documented by help()"
        assert words in found.group(1), found.group(1)


def test_help_shows_no_object_address_as_a_default() -> None:
    text = rendered()
    assert not re.search(r"object at 0x[0-9a-f]+", text), re.findall(r".{60}object at 0x", text)
    assert "timeout: " in text and "= NOT_GIVEN" in text


def test_the_endpoints_are_the_same_objects_on_every_access() -> None:
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1")
    assert client.chat is client.chat and client.responses is client.responses
    assert isinstance(client.messages, fluxstream._client.Messages)
