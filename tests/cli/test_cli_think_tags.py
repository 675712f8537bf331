"""``--think-tags``: the CLI shows reasoning sent inside the text as it shows a provider's own
reasoning (``[reasoning] ...``), live (``chat``) and from a recording (``replay``)."""

from __future__ import annotations

from pathlib import Path

from cli_support import run_cli

from fluxstream.server import ServerThread, script_for

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "think_tags" / "llama-chat-think.json"


def test_chat_shows_tagged_reasoning_as_reasoning() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    tagged = script_for("chat", body, "think-tags").choices[0].text
    reasoning, _, answer = tagged.removeprefix("<think>").partition("</think>\n\n")
    with ServerThread(profile="think-tags") as server:
        plain = run_cli("chat", "--base-url", server.base_url, "--api-key", "k", "--model", "m",
                        "hi")
        split = run_cli("chat", "--base-url", server.base_url, "--api-key", "k", "--model", "m",
                        "--think-tags", "hi")
    assert plain.returncode == split.returncode == 0, (plain.stderr, split.stderr)
    assert plain.stdout.startswith("<think>") and "[reasoning]" not in plain.stdout
    assert split.stdout.startswith(f"[reasoning] {reasoning}\n{answer}")


def test_replay_splits_a_recorded_llama_cpp_stream() -> None:
    plain = run_cli("replay", str(FIXTURE))
    split = run_cli("replay", "--think-tags", str(FIXTURE))
    assert plain.returncode == split.returncode == 0
    assert "[text 0] <think>" in plain.stdout and "[reasoning 0]" not in plain.stdout
    assert "[reasoning 0] user \n[text 0] assistant." in split.stdout
