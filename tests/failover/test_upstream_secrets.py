"""An :class:`Upstream` never shows a secret: not in its ``repr`` or ``str`` (nor a tuple of
them, ``client.fallbacks``, nor a model that holds one), not in pytest's comparison of two of
them, not in an error raised while it is checked; a URL's ``user:password@`` and query values,
its key and its credential headers stay hidden, and what a stream reports of it (handoff
events, segments, resume tokens, log records) is only its label.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pydantic
import pytest

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Upstream
from fluxstream.server import ServerThread

SECRET = "SECRET"
URL = f"https://user:pw-{SECRET}1@api.example.test:8443/v1beta?key=AIza-{SECRET}2&alt=x"
HEADERS = {"Authorization": f"Bearer {SECRET}3", "x-goog-user-project": "proj",
           "Ocp-Apim-Subscription-Key": f"{SECRET}4"}


def secret_upstream(**kw: Any) -> Upstream:
    return Upstream(URL, api="gemini", api_key=f"sk-{SECRET}5", headers=HEADERS, **kw)


def test_repr_and_str_hide_every_secret_and_keep_the_rest() -> None:
    up = secret_upstream(model="gemini-x", max_tokens=99)
    for shown in (repr(up), str(up), repr((up, up)), f"{up}", repr([up])):
        assert SECRET not in shown, shown
    shown = repr(up)
    assert "api.example.test:8443/v1beta" in shown
    assert "gemini-x" in shown and "99" in shown and "gemini" in shown
    assert "key=" in shown and "alt=" in shown  # the query's names, not its values
    assert "authorization" in shown and "x-goog-user-project" in shown
    assert "api_key=set" in shown
    assert "api_key=none" in repr(Upstream("http://127.0.0.1:1/v1"))


def test_client_fallbacks_repr_hides_secrets() -> None:
    client = fluxstream.AsyncClient("http://127.0.0.1:1/v1", api_key="k",
                                    fallbacks=[secret_upstream(name="backup")])
    assert SECRET not in repr(client.fallbacks) and "backup" in repr(client.fallbacks)


def test_a_model_holding_an_upstream_shows_no_secret() -> None:
    class Settings(pydantic.BaseModel):
        fallback: Any

    assert SECRET not in repr(Settings(fallback=secret_upstream()))
    assert SECRET not in str(Settings(fallback=secret_upstream()))


def test_pytest_comparison_of_two_upstreams_shows_no_secret() -> None:
    """Two upstreams that differ only in their secrets are not equal, and a failed
    ``assert a == b`` explains it (pytest compares a dataclass field by field, showing
    each differing one) without showing them."""
    one = secret_upstream()
    other = Upstream(URL.replace("2&", "9&"), api="gemini", api_key=f"sk-{SECRET}6",
                     headers={**HEADERS, "Authorization": f"Bearer {SECRET}7"})
    assert one != other
    assert one == secret_upstream() and hash(one) == hash(secret_upstream())
    assert len({one, other, secret_upstream()}) == 2
    with pytest.raises(AssertionError) as failed:
        assert one == other
    assert "Upstream" in str(failed.value) and SECRET not in str(failed.value)
    for field in dataclasses.fields(one):  # what pytest explains field by field
        if field.compare:
            assert SECRET not in repr(getattr(one, field.name)), field.name


@pytest.mark.parametrize(("make", "error"), [
    (lambda: Upstream(f"http://user:{SECRET}@h:99999/v1"), ValueError),
    (lambda: Upstream(f"ftp://user:{SECRET}@h/v1?key={SECRET}"), ValueError),
    (lambda: Upstream(f"{SECRET}"), ValueError),
    (lambda: Upstream("http://h/v1", headers={"Authorization": f"Bearer {SECRET}\n\x00"}),
     ValueError),
    (lambda: Upstream("http://h/v1", headers={"x-api-key": f"{SECRET}\u00e9"}), ValueError),
    (lambda: Upstream("http://h/v1", headers={f"Authorization: Bearer {SECRET}": "x"}),
     ValueError),
    (lambda: Upstream("http://h/v1", headers={"x-api-key": 123}), TypeError),  # type: ignore[dict-item]
    (lambda: Upstream("http://h/v1", api_key=f"{SECRET}\n\x01"), ValueError),
    (lambda: Upstream("http://h/v1", api=f"{SECRET}-api-of-a-long-name-nobody-has-ever"),
     LookupError),
    (lambda: Failover(shared_headers=("Authorization",)), ValueError),
    (lambda: Failover(shared_headers=(f"x-api-key: {SECRET}",)), ValueError),
    (lambda: Failover(shared_headers=("x-request-id", "Cookie")), ValueError),
    (lambda: Failover(shared_headers="x-request-id"), TypeError),  # type: ignore[arg-type]
    (lambda: Failover(shared_headers=(7,)), TypeError),  # type: ignore[arg-type]
])
def test_an_upstream_refused_when_made_never_shows_its_secret(
    make: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        make()
    assert SECRET not in str(raised.value)


def test_shared_headers_are_names_checked_and_lowercased() -> None:
    assert Failover(shared_headers=["X-Request-Id", "traceparent"]).shared_headers == (
        "x-request-id", "traceparent")
    assert Failover().shared_headers == ()


@pytest.mark.anyio
async def test_what_a_stream_reports_of_a_fallback_is_its_label(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="fluxstream")
    with ServerThread(faults="drop-after-events=6") as primary, ServerThread() as fallback:
        port = fallback.base_url.split(":")[2].split("/")[0]
        up = Upstream(f"http://user:pw-{SECRET}@127.0.0.1:{port}/v1?key={SECRET}",
                      api="gemini", api_key=f"{SECRET}-key", headers=HEADERS)
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[up],
            resume=fluxstream.ResumePolicy(last_event_id=False),
        ) as client:
            stream = client.chat.stream(model="m", messages=[{"role": "user", "content": "hi"}])
            events = [event async for event in _events(stream)]
            token = stream.resume_token()
    assert stream.reply.outcome is Outcome.DONE, stream.cause
    (handoff,) = [e for e in events if isinstance(e, Handoff)]
    assert handoff.upstream == up.label == f"127.0.0.1:{port}/v1/gemini"
    reported = [repr(events), repr(stream.reply.segments), repr(token), caplog.text,
                repr([r.__dict__ for r in caplog.records])]
    for text in reported:
        assert SECRET not in text


async def _events(stream: fluxstream.ReplyStream) -> Any:
    async with stream:
        async for event in stream:
            yield event
