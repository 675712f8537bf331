"""The ``fluxstream`` command line's arguments: every command, option and default, and the help.

The lists ``serve --help`` shows (quirk profiles, faults and their syntax, the request headers
that choose them) come from :mod:`fluxstream.server` itself, so they cannot drift from what
the server accepts; they are built only when help is asked for (importing the server costs
every other command a quarter second).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import textwrap
from collections.abc import Callable
from typing import Any

from .. import apis
from .fallback import FALLBACK_HEADING, FALLBACK_HELP, FALLBACK_OPTIONS, parse_fallback

__all__ = ["DEFAULT_PROMPT", "FORMATS", "build_parser"]

DEFAULT_PROMPT = "Tell me how fluxstream streams a reply, token by token."
#: Wire formats of ``--format``: the registered APIs, each served by an attribute of the
#: client (``client.chat``, ``client.responses``, ``client.messages``).
FORMATS = apis.names()
#: The first registered API: the default ``--format``.
DEFAULT_FORMAT = FORMATS[0]
#: The APIs whose SDK reads other environment variables than the client's own.
_OWN_SETTINGS = [api for api in apis.registered() if api.base_url_variable != "OPENAI_BASE_URL"]

_BASE_URL_HELP = (
    "the base URL as the format's own SDK takes it (e.g. http://127.0.0.1:8787/v1; for"
    " anthropic_messages and gemini the host alone will do); default: OPENAI_BASE_URL"
    + "".join(
        f", or with --format {api.name} {api.base_url_variable} (as its SDK reads it), else"
        f" {api.root_url(api.default_base_url)}"
        for api in _OWN_SETTINGS
    )
)
_API_KEY_HELP = (
    "default: OPENAI_API_KEY"
    + "".join(f" ({api.api_key_variable} with --format {api.name})" for api in _OWN_SETTINGS)
)
_RAW_HELP = (
    "print control characters from the server or capture as they are (by default escape"
    " sequences are shown as \\x1b..., never sent to the terminal)"
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose epilog is made only when its help is printed."""

    def __init__(
        self, *args: Any, epilog_factory: Callable[[], str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._epilog_factory = epilog_factory

    def format_help(self) -> str:
        if self._epilog_factory is not None:
            self.epilog = self._epilog_factory()
        return super().format_help()


def _either(names: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else list(names))


def _version() -> str:
    try:
        return importlib.metadata.version("fluxstream")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown (not installed)"


#: Width of the help's lists (argparse wraps its own text at the terminal's width, ~80).
_WIDTH = 88


def _table(rows: dict[str, str]) -> list[str]:
    """``name  description`` lines, descriptions wrapped and aligned."""
    width = max(map(len, rows)) + 2
    lines = []
    for name, text in rows.items():
        # Not at hyphens: ``status-body=json`` must stay whole to be found and copied.
        wrapped = textwrap.wrap(text, _WIDTH - width - 2, break_on_hyphens=False) or [""]
        lines.append(f"  {name:<{width}}{wrapped[0]}")
        lines += [" " * (width + 2) + more for more in wrapped[1:]]
    return lines


def _fault_syntax() -> dict[str, str]:
    """Each fault's syntax and description, as :mod:`fluxstream.server.faults` documents
    them (every key the server accepts is listed, documented or not)."""
    from ..server import FAULT_KEYS, faults

    # ``python -OO`` drops docstrings: then the keys alone.
    _, _, keys = (faults.__doc__ or "").partition("\nKeys")
    rows: dict[str, str] = {}
    last = None
    for line in keys.splitlines()[1:]:
        entry = re.match(r"``(\S+)``\s+(.*)", line)
        if entry:
            last = entry[1]
            rows[last] = entry[2]
        elif last is not None and line.strip():
            rows[last] += " " + line.strip()
    documented = " ".join(f"{name} {text}" for name, text in rows.items())
    rows.update({f"{key}=...": "" for key in FAULT_KEYS if f"{key}=" not in documented})
    return {name: text.replace("``", "") for name, text in rows.items()}


def _server_epilog() -> str:
    from ..server import FAULT_HEADER, PROFILE_DESCRIPTIONS, PROFILE_HEADER

    def heading(text: str) -> list[str]:
        return textwrap.wrap(text, _WIDTH)

    return "\n".join([
        *heading("quirk profiles (--profile a,b; per request the header"
                 f" '{PROFILE_HEADER}: a,b' or the model name 'model@a,b'):"),
        *_table(PROFILE_DESCRIPTIONS),
        "",
        *heading(f"faults (--fault k=v,k=v; per request the header '{FAULT_HEADER}: k=v,k=v',"
                 " whose keys win over the server's; sizes in bytes, times in seconds):"),
        *_table(_fault_syntax()),
    ])


def _fallback_epilog() -> str:
    return "\n".join([*textwrap.wrap(FALLBACK_HEADING, _WIDTH), *_table(FALLBACK_OPTIONS)])


def _request_flags(p: argparse.ArgumentParser) -> None:
    """Any request field, for ``chat`` and ``capture`` alike."""
    p.add_argument("--max-tokens", type=int, default=None,
                   help="sent as max_tokens (max_output_tokens for responses)")
    p.add_argument(
        "-p", "--param", action="append", metavar="KEY=VALUE",
        help="a request field (repeatable); VALUE is JSON when it parses, else a string:"
        " -p n=2 -p temperature=0.2 -p 'stop=[\"\\n\"]'",
    )
    p.add_argument(
        "--body", metavar="JSON",
        help="a JSON object of request fields (tools, n, ...); -p and --max-tokens win over it",
    )
    p.add_argument(
        "--no-usage", action="store_true",
        help="do not ask for usage (no stream_options.include_usage)",
    )


def _endpoint_flags(p: argparse.ArgumentParser, what: str) -> None:
    """Where ``chat`` and ``capture`` send the request, and how."""
    p.add_argument("--base-url", default=None, help=_BASE_URL_HELP)
    p.add_argument("--model", default=os.environ.get("FLUXSTREAM_MODEL", "gpt-4o-mini"),
                   help="default: FLUXSTREAM_MODEL, else %(default)s")
    p.add_argument("--api-key", default=None, help=_API_KEY_HELP)
    p.add_argument("--header", action="append", help="an extra request header 'Name: value'")
    _request_flags(p)
    _format_flag(p, what)


def _format_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--format", choices=FORMATS, default=DEFAULT_FORMAT,
        help=f"{what}: {DEFAULT_FORMAT} (default), {_either(FORMATS[1:])}",
    )


def _demo_parser(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="stream a reply live from the embedded server",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog_factory=_server_epilog,
    )
    demo.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    demo.add_argument("--model", default="flux-demo", help="(default: %(default)s)")
    demo.add_argument(
        "--profile", help="quirk profile(s), e.g. azure,heartbeats (default: heartbeats)"
    )
    demo.add_argument(
        "--fault", action="append",
        help="a fault, e.g. drop-after=200 (repeatable; replaces the default small writes and"
        " one resumed drop)",
    )
    demo.add_argument("--tools", action="store_true", help="ask for parallel tool calls")
    demo.add_argument(
        "--no-faults", action="store_true",
        help="a clean connection: no heartbeats, small writes or drop (--fault/--profile replace"
        " those defaults)",
    )
    demo.add_argument(
        "--pace", type=float, default=0.03,
        help="seconds between deltas, 0: as fast as possible (default: %(default)s)",
    )
    demo.add_argument("--header", action="append", help="an extra request header 'Name: value'")
    demo.add_argument("--raw", action="store_true", help=_RAW_HELP)
    _format_flag(demo, "the API the demo speaks to its embedded server")
    demo.add_argument(
        "--handoff", action="store_true",
        help="two embedded servers: the first drops the connection mid-reply and the reply goes"
        " on, on the second (a fallback, in another API by default), each character once",
    )
    demo.add_argument(
        "--fallback-format", choices=FORMATS, default=None,
        help="with --handoff, the API the fallback speaks (default: chat_completions, or"
        " anthropic_messages when --format is chat_completions)",
    )


def _serve_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the embedded server for other clients (Chat Completions /v1/chat/completions,"
        " Responses /v1/responses, Anthropic Messages /v1/messages, Gemini"
        " /v1beta/models/MODEL:streamGenerateContent)",
        description="Run the embedded server until Ctrl-C (a normal stop: exit 0).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog_factory=_server_epilog,
    )
    serve.add_argument("--host", default="127.0.0.1", help="(default: %(default)s)")
    serve.add_argument("--port", type=int, default=8787, help="(default: %(default)s)")
    serve.add_argument(
        "--profile", default="openai",
        help="the quirk profile(s) of every reply, listed below (default: %(default)s)",
    )
    serve.add_argument(
        "--api-key", default=None, help="require this key (default: none, any key is accepted)"
    )
    serve.add_argument(
        "--fault",
        help="faults for every request, listed below, e.g. batch=65536 (default: none)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="fluxstream",
        description="Stream LLM replies correctly from Chat Completions, OpenAI Responses,"
        " Anthropic Messages and Gemini endpoints.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _demo_parser(sub)

    chat = sub.add_parser(
        "chat",
        help="stream a reply from any Chat Completions, Responses, Anthropic Messages or Gemini"
        " endpoint",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog_factory=_fallback_epilog,
    )
    chat.add_argument("prompt")
    chat.add_argument("--raw", action="store_true", help=_RAW_HELP)
    _endpoint_flags(chat, "the endpoint's API (the prompt is the Responses `input` there)")
    chat.add_argument(
        "--fallback", action="append", type=parse_fallback, metavar="URL[,OPTION=VALUE...]",
        help=FALLBACK_HELP,
    )
    _think_tags_flag(chat)
    chat.add_argument(
        "--json-paths", action="store_true",
        help="say each completed value of a tool call's arguments (or of a JSON reply asked for"
        " with response_format) on a note line of its own, as soon as it is complete",
    )

    _serve_parser(sub)

    cap = sub.add_parser("capture", help="record a response's raw bytes to a fixture file")
    cap.add_argument("prompt")
    cap.add_argument("-o", "--output", required=True)
    _endpoint_flags(cap, "the endpoint's API; recorded in the capture for replay")

    rep = sub.add_parser("replay", help="run a fixture (capture or .sse) through the parser")
    rep.add_argument("file")
    rep.add_argument("--read-size", type=int, default=0,
                     help="re-split into reads of N bytes (default: as recorded)")
    rep.add_argument("--json", action="store_true", help="print the reply as JSON")
    rep.add_argument("--raw", action="store_true", help=_RAW_HELP)
    rep.add_argument(
        "--format", choices=(*FORMATS, "auto"), default=None,
        help="the wire format (default: the one the capture recorded, else auto: recognised"
        " from the first event that says)",
    )
    _think_tags_flag(rep)
    return p


def _think_tags_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--think-tags", action="store_true",
        help="reasoning the server sends inside the text between <think>, <thinking> or"
        " <reasoning> tags (at the start of the reply) is shown as reasoning",
    )
