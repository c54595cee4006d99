"""The tool's exception types, and the one-line rendering of Google's API errors.

Exit statuses: 2 for a usage problem (bad input, fixed by changing the command line),
1 for a cloud failure (the request was sound, Google said no), 130 for Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

import click

# Checked by name so that nothing of Google's is imported just to classify an error.
_GOOGLE_ERROR_MODULES = ("google.api_core.exceptions", "google.auth.exceptions")


class UsageProblem(click.UsageError):
    """Bad input: a flag, a spec or a name the tool can refuse before calling any API (exit 2)."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        # One line: the message already says what would be right, so click's usage banner
        # (kept for its own parsing errors) would only push it down the screen.
        click.echo(f"Error: {self.format_message()}", file=file, err=True)


class CloudError(click.ClickException):
    """A failure reported by Google Cloud, or an outcome the cloud left us in (exit 1)."""

    exit_code = 1


class Interrupted(click.ClickException):
    """The user pressed Ctrl-C (exit 130, as shells report SIGINT). `message`: what to do next, said
    once on the line that starts with "Interrupted." (nothing else prints it)."""

    exit_code = 130

    def __init__(self, message: str = "") -> None:
        super().__init__(message or "interrupted")
        self.advice = message

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"Interrupted. {self.advice}".rstrip(), file=file, err=True)


def is_connection_error(exc: BaseException) -> bool:
    """A connection failure (requests' for REST, or Python's own), checked by name so requests is not
    imported here."""
    return any(cls.__module__.startswith("requests") and cls.__name__ == "ConnectionError"
               for cls in type(exc).__mro__) or isinstance(exc, ConnectionError)


def is_google_error(exc: BaseException) -> bool:
    """True when exc is one of google.api_core's (or google.auth's) exception classes."""
    return any(cls.__module__ in _GOOGLE_ERROR_MODULES for cls in type(exc).__mro__)


def error_entries(exc: BaseException) -> list[Any]:
    """The entries of a Google error's `errors` ([] when it has none or they cannot be read)."""
    try:
        return list(getattr(exc, "errors", None) or ())
    except Exception:  # a malformed payload must not hide the error itself
        return []


def entry_text(err: Any, name: str) -> str | None:
    """One field of an error entry, the one place that reads them: `errors` holds dicts (REST bodies),
    proto-plus messages (Compute operation errors) or grpc.Call objects whose `code`/`details` are
    methods, so only real, non-empty strings count."""
    value = err.get(name) if isinstance(err, Mapping) else getattr(err, name, None)
    return value if isinstance(value, str) and value else None


def describe_google_error(exc: BaseException) -> str:
    """One line for a Google API error: '409 alreadyExists: The resource ... already exists'. Retries
    that ran out (api_core's RetryError) are told by their last error and how long they tried."""
    cause = getattr(exc, "cause", None)
    if type(exc).__name__ == "RetryError" and isinstance(cause, BaseException) and is_google_error(cause):
        tried = getattr(exc, "message", "") or ""
        seconds = tried.split("Timeout of ", 1)[-1].split("s exceeded", 1)[0] if "Timeout of " in tried else ""
        return f"{describe_google_error(cause)} (still failing after {seconds} s of retries)" if seconds else \
            f"{describe_google_error(cause)} (still failing after retries)"
    errors = error_entries(exc)
    first = errors[0] if errors else None

    reason = None
    try:
        reason = getattr(exc, "reason", None)  # from an ErrorInfo detail, REST or gRPC
    except Exception:
        reason = None
    if not isinstance(reason, str) or not reason:
        # REST bodies put the reason in errors[].reason; Compute operations in errors[].code.
        reason = first is not None and (entry_text(first, "reason") or entry_text(first, "code")) or None

    # Prefer the API's own message: the exception's message is prefixed with method and URL.
    message = first is not None and entry_text(first, "message") or None
    code = getattr(exc, "code", None)
    if message is None:
        message = getattr(exc, "message", None) if code is not None else None
        if not isinstance(message, str) or not message:
            message = str(exc) or type(exc).__name__

    head = " ".join(str(part) for part in (code if isinstance(code, int) else None, reason) if part)
    line = f"{head}: {message}" if head else message
    if type(exc).__name__ == "DefaultCredentialsError":  # the first thing a newcomer meets without gcloud set up
        line += (" Run 'gcloud auth application-default login'; or, to try gcpgpu with no cloud, start the emulator "
                 "('gcpgpu emulator start') and export GCPGPU_EMULATOR=127.0.0.1:8085.")
    return " ".join(line.split())  # one line, whatever newlines the server sent


def one_line(exc: BaseException) -> str:
    """An error as one line, whatever it is (a Google error, a connection failure, a timeout)."""
    if is_google_error(exc):
        text = describe_google_error(exc)
    elif is_connection_error(exc):  # urllib3's own text is a paragraph of pool and socket details
        text = f"cannot reach the API endpoint ({type(exc).__name__})"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]
