"""Cassettes: recorded once through the kit's upstream with every secret redacted on write,
replayed read by read (optionally at the recorded pace), refused clearly when the request no
longer matches, and refused with path and reason when the file is newer or corrupted."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import httpx
import pytest

from fluxstream.cli.capture import load_capture, replay_capture
from fluxstream.testing import CassetteError, Upstream, load_cassette
from fluxstream.testing._cassette import CassetteRecorder, CassetteReplay

KEY = "sk-live-0123456789abcdef"
GOOGLE_KEY = "AIzaSy-0123456789abcdef"
COOKIE = "session=c00kie-0123456789"
ANSWER = "Recorded once, replayed forever."
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
GEMINI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


def chat_text(body: str) -> str:
    text = ""
    for line in body.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A cassette recorded from a "real" server through the kit, keys and a cookie sent."""
    path = tmp_path / "cassettes" / "greeting.json"
    with Upstream() as real, Upstream() as kit:
        real.reply(text=ANSWER)
        recorder = CassetteRecorder(path, real.url)
        kit.serve_from(recorder)
        with httpx.Client() as client:
            chat = client.post(kit.base_url + "/chat/completions", json=CHAT,
                               headers={"Authorization": f"Bearer {KEY}", "Cookie": COOKIE})
            gemini = client.post(f"{kit.url}{GEMINI_PATH}?alt=sse&key={GOOGLE_KEY}",
                                 json=GEMINI, headers={"x-goog-api-key": GOOGLE_KEY})
        assert chat.status_code == 200 and chat_text(chat.text) == ANSWER
        assert gemini.status_code == 200 and ANSWER.split()[0] in gemini.text
        # the secrets did go to the real server: the cassette must leave them out
        assert f"Bearer {KEY}" in real.secrets and GOOGLE_KEY in real.secrets
        recorder.save()
    return path


def test_no_secret_reaches_the_cassette(recorded: Path) -> None:
    text = recorded.read_text(encoding="utf-8")
    for secret in (KEY, GOOGLE_KEY, COOKIE, "c00kie-0123456789"):
        assert secret not in text
    cassette = load_cassette(recorded)
    chat, gemini = (i["request"] for i in cassette.interactions)
    assert chat["headers"]["authorization"] == "<redacted>"
    assert chat["headers"]["cookie"] == "<redacted>"
    assert gemini["headers"]["x-goog-api-key"] == "<redacted>"
    assert "key=%3Credacted%3E" in gemini["path"] or "key=<redacted>" in gemini["path"]
    assert gemini["path"].startswith(GEMINI_PATH + "?alt=sse")
    for read in cassette.interactions[0]["reads"]:  # nor in a body the server sent
        assert KEY.encode() not in base64.b64decode(read["b64"])


def test_each_interaction_is_a_capture_the_cli_replays(recorded: Path, tmp_path: Path) -> None:
    cassette = load_cassette(recorded)
    one = tmp_path / "one.json"
    one.write_text(json.dumps(cassette.interactions[0]), encoding="utf-8")
    assert replay_capture(load_capture(one)).text == ANSWER
    assert load_cassette(one).interactions == [cassette.interactions[0]]  # a bare capture


def test_a_cassette_replays_what_was_recorded(recorded: Path) -> None:
    replay = CassetteReplay(load_cassette(recorded))
    with Upstream() as kit:
        kit.serve_from(replay)
        with httpx.Client() as client:
            chat = client.post(kit.base_url + "/chat/completions", json=CHAT)
            gemini = client.post(f"{kit.url}{GEMINI_PATH}?alt=sse&key=other", json=GEMINI)
    assert chat.headers["content-type"].startswith("text/event-stream")
    assert chat_text(chat.text) == ANSWER
    assert ANSWER.split()[0] in gemini.text
    assert replay.mismatches == []


def test_pacing_replays_each_read_at_its_recorded_time(tmp_path: Path) -> None:
    reads = [b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
             b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n', b"data: [DONE]\n\n"]
    record = {"format": "fluxstream-capture/1",
              "request": {"path": "/v1/chat/completions", "body": CHAT},
              "status": 200, "content_type": "text/event-stream", "headers": {},
              "reads": [{"t": t, "b64": base64.b64encode(r).decode()}
                        for t, r in zip((0.0, 0.5, 1.0), reads, strict=True)]}
    path = tmp_path / "paced.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    timings = {}
    for pace in (False, True):
        with Upstream() as kit:
            kit.serve_from(CassetteReplay(load_cassette(path), pace=pace))
            start = time.monotonic()
            body = httpx.post(kit.base_url + "/chat/completions", json=CHAT).text
            timings[pace] = time.monotonic() - start
        assert chat_text(body) == "ab"
    assert timings[True] >= 1.0 > timings[False]


def test_a_request_that_no_longer_matches_is_refused_saying_where(recorded: Path) -> None:
    replay = CassetteReplay(load_cassette(recorded))
    changed = {**CHAT, "messages": [{"role": "user", "content": "hello"}]}
    with Upstream() as kit:
        kit.serve_from(replay)
        response = httpx.post(kit.base_url + "/chat/completions", json=changed)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "greeting.json" in message and "request 1" in message
    assert "'messages[0].content' is \"hi\" in the cassette, \"hello\" in the request" in message
    assert replay.mismatches == [message]


def test_a_request_beyond_the_recording_is_refused(recorded: Path) -> None:
    replay = CassetteReplay(load_cassette(recorded))
    with Upstream() as kit:
        kit.serve_from(replay)
        with httpx.Client() as client:
            client.post(kit.base_url + "/chat/completions", json=CHAT)
            client.post(f"{kit.url}{GEMINI_PATH}?alt=sse", json=GEMINI)
            third = client.post(kit.base_url + "/chat/completions", json=CHAT)
    assert third.status_code == 400
    assert "request 3" in replay.mismatches[0] and "the 2 it holds" in replay.mismatches[0]


def test_a_recorded_drop_is_replayed_as_a_drop(tmp_path: Path) -> None:
    record = {"format": "fluxstream-capture/1",
              "request": {"path": "chat/completions", "body": CHAT},
              "status": 200, "content_type": "text/event-stream", "headers": {},
              "reads": [{"t": 0.0,
                         "b64": base64.b64encode(b'data: {"choices":[]}\n\n').decode()}],
              "error": {"type": "RemoteProtocolError", "message": "peer closed connection"}}
    path = tmp_path / "dropped.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    with Upstream() as kit:
        kit.serve_from(CassetteReplay(load_cassette(path)))
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(kit.base_url + "/chat/completions", json=CHAT)
        assert [r.ending for r in kit.wait_responses(1)] == ["dropped"]


@pytest.mark.parametrize(("content", "reason"), [
    ('{"format": "fluxstream-cassette/2", "interactions": []}',
     "'fluxstream-cassette/2' is not one this fluxstream reads"),
    ('{"format": "fluxstream-cassette/1", "interactions": [{"format": "fluxstream-capture/9"}]}',
     "interaction 1: format 'fluxstream-capture/9' is not one this fluxstream reads"),
    ('{"format": "vcr", "interactions": []}', "is not a fluxstream cassette"),
    ('{"format": "fluxstream-cassette/1", "interactions": [', "is not JSON"),
    ('{"format": "fluxstream-cassette/1", "interactions": {}}', "'interactions' is not a list"),
    ('{"format": "fluxstream-cassette/1", "interactions": [{"format": "fluxstream-capture/1",'
     ' "request": {"path": "x"}, "reads": [{"b64": "@@"}]}]}', "interaction 1: not a valid"),
    ('{"format": "fluxstream-cassette/1", "interactions": [{"format": "fluxstream-capture/1",'
     ' "reads": []}]}', "interaction 1: no request path"),
    ("[]", "is not a JSON object"),
])
def test_a_newer_or_corrupted_cassette_is_refused_with_its_path_and_reason(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CassetteError) as raised:
        load_cassette(path)
    assert str(path) in str(raised.value) and reason in str(raised.value)
    assert raised.value.path == path


def test_a_missing_cassette_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match=r"missing\.json: cannot be read"):
        load_cassette(tmp_path / "missing.json")
