"""fluxstream's testing kit: prove an app's streaming code against real faults, in pytest.

Installed with fluxstream, it is a pytest plugin (the ``pytest11`` entry point
``fluxstream``): a test asks for ``fluxstream_upstream`` and gets the embedded server on
127.0.0.1 for that test alone, speaking the four APIs (its :attr:`Upstream.base_urls`), whose
replies and faults the test scripts and whose records (requests with secrets masked, when the
client went away) it asserts on; ``fluxstream_cassette`` replays recorded real traffic. Any
client works: openai-python, the Anthropic SDK, google-genai, LiteLLM, plain httpx, fluxstream.

::

    def test_my_app_survives_a_drop(fluxstream_upstream):
        fluxstream_upstream.reply(text="Paris is the capital of France.")
        fluxstream_upstream.drop(after_events=3)
        assert my_app.ask("capital?", base_url=fluxstream_upstream.base_url) == "Paris ..."

This module imports no pytest (the helpers serve any runner). pytest loads the small module
``_fluxstream_pytest_plugin`` beside the package, which imports the kit only when a test asks
for a fixture (:mod:`fluxstream.testing._plugin` holds the fixtures' bodies), so a suite that
never does pays nothing for it.
"""

from __future__ import annotations

from ._asserts import assert_no_secret_logged, assert_no_text_twice, assert_upstream_closed
from ._cassette import CASSETTE_FORMAT, Cassette, CassetteError, load_cassette
from ._spec import FAULT_KINDS, REPLY_FIELDS, ScriptError
from ._upstream import Upstream

__all__ = [
    "CASSETTE_FORMAT",
    "FAULT_KINDS",
    "REPLY_FIELDS",
    "Cassette",
    "CassetteError",
    "ScriptError",
    "Upstream",
    "assert_no_secret_logged",
    "assert_no_text_twice",
    "assert_upstream_closed",
    "load_cassette",
]
