"""Every public error is importable from ``fluxstream`` itself, as the README names them.

``RelayKeyError``, ``RelayPositionError`` and ``RelayUnavailableError`` (what a follower of a
relayed reply catches) were importable only from ``fluxstream.errors``.
"""

from __future__ import annotations

import inspect

import fluxstream
import fluxstream.errors


def test_every_error_class_is_exported_by_the_package() -> None:
    classes = [
        name for name, value in vars(fluxstream.errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException)
        and value.__module__ == "fluxstream.errors"
    ]
    assert set(classes) == set(fluxstream.errors.__all__)
    for name in classes:
        assert name in fluxstream.__all__, name
        assert getattr(fluxstream, name) is getattr(fluxstream.errors, name)


def test_the_relay_errors_import_from_the_package() -> None:
    from fluxstream import (
        RelayError,
        RelayKeyError,
        RelayLeaseLostError,
        RelayPositionError,
        RelayUnavailableError,
    )

    for error in (RelayKeyError, RelayPositionError, RelayUnavailableError, RelayLeaseLostError):
        assert issubclass(error, RelayError) and issubclass(error, fluxstream.FluxstreamError)


def test_the_package_all_names_only_what_it_has() -> None:
    for name in fluxstream.__all__:
        assert getattr(fluxstream, name) is not None, name


def test_the_error_a_bad_header_value_raises_is_public() -> None:
    """A non-ASCII header value is refused with ``RequestHeaderError`` before anything is
    sent; it was defined in a private transport module, so a caller could not name it."""
    from fluxstream import RequestHeaderError
    from fluxstream._io.http_library import RequestHeaderError as raised

    assert raised is RequestHeaderError is fluxstream.errors.RequestHeaderError
    assert issubclass(RequestHeaderError, ValueError)
    assert issubclass(RequestHeaderError, fluxstream.FluxstreamError)
