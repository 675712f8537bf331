"""``fluxstream --version`` and a ``serve --help`` that documents what the server accepts."""

from __future__ import annotations

import importlib.metadata

from cli_support import run_cli

from fluxstream.server import FAULT_KEYS, PROFILE_NAMES


def test_version_is_the_installed_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"fluxstream {importlib.metadata.version('fluxstream')}"


def test_serve_help_lists_profiles_faults_and_defaults() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for name in PROFILE_NAMES:
        assert f"\n  {name} " in text or f"\n  {name}\n" in text, name
    for key in FAULT_KEYS:
        assert f"{key}=" in text, key  # with its syntax
    assert "X-Fluxstream-Fault" in text and "X-Fluxstream-Profile" in text
    flat = " ".join(text.split())  # help lines wrap at the terminal's width
    for default in ("(default: 127.0.0.1)", "(default: 8787)", "(default: openai)",
                    "(default: none, any key is accepted)", "(default: none)"):
        assert default in flat, default
    assert "--api-key" in text and "--fault" in text
