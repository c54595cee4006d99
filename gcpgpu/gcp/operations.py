"""Calling Compute mutations safely and waiting on their operations, many at a time.

- Every mutation carries a requestId (a UUID) chosen once, so a retry after a timeout or 503 is
  the same request to the server and never creates a second VM.
- Transient failures (408/429/5xx) are retried with bounded exponential backoff and jitter,
  using google.api_core's Retry.
- Waiting uses operations.wait (the server holds the call until DONE, up to about 2 minutes) on
  the right zone/region/global operations client, in parallel threads for many operations.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .clients import Clients
from .errors import is_transient

# Backoff: 0.5 s doubling to 8 s, with jitter; give up on a request after 90 s of retrying.
RETRY_INITIAL, RETRY_MAX, RETRY_DEADLINE = 0.5, 8.0, 90.0
MAX_PARALLEL = 32


def retrying(initial: float = RETRY_INITIAL, maximum: float = RETRY_MAX, deadline: float = RETRY_DEADLINE) -> Any:
    from google.api_core.retry import Retry

    return Retry(predicate=is_transient, initial=initial, maximum=maximum, multiplier=2.0, timeout=deadline)


def new_request_id() -> str:
    return str(uuid.uuid4())


def call(fn: Callable[..., Any], request: dict[str, Any], *, retry: Any = None) -> Any:
    """Call a Compute mutation with a requestId fixed across retries, retrying transient failures.

    `request` is the method's request as a dict (requestId is not one of the flattened arguments).
    """
    request = {**request, "request_id": request.get("request_id") or new_request_id()}
    policy = retry or retrying()
    return policy(lambda: fn(request=request))()


def _scope(op: Any) -> tuple[str, str | None]:
    raw = getattr(op, "_extended_operation", op)
    if raw.zone:
        return "zone", raw.zone.rsplit("/", 1)[-1]
    if raw.region:
        return "region", raw.region.rsplit("/", 1)[-1]
    return "global", None


def wait(clients: Clients, project: str, op: Any, timeout: float = 1800.0) -> Any:
    """Block until one operation is DONE; raise its error as google.api_core would."""
    from google.api_core import exceptions

    raw = getattr(op, "_extended_operation", op)
    kind, where = _scope(op)
    deadline = time.monotonic() + timeout
    name = raw.name
    done = raw.status == type(raw).Status.DONE
    client = clients.compute({"zone": "ZoneOperationsClient", "region": "RegionOperationsClient",
                              "global": "GlobalOperationsClient"}[kind])
    args = {"project": project, "operation": name}
    if where:
        args[kind] = where
    while not done:
        if time.monotonic() > deadline:
            raise TimeoutError(f"operation {name} did not finish in {timeout:.0f} s")
        raw = retrying()(client.wait)(**args)
        done = raw.status == type(raw).Status.DONE
    if raw.error and raw.error.errors:
        raise exceptions.from_http_status(raw.http_error_status_code or 400, raw.http_error_message or "operation failed",
                                          errors=list(raw.error.errors), response=raw)
    return raw


def wait_all(clients: Clients, project: str, ops: Iterable[Any], timeout: float = 1800.0) -> list[BaseException | None]:
    """Wait on many operations in parallel; returns each one's error (or None), in order."""
    ops = list(ops)
    if not ops:
        return []

    def one(op: Any) -> BaseException | None:
        try:
            wait(clients, project, op, timeout)
            return None
        except Exception as e:  # collected, so one failure does not abandon the others' waits
            return e

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(ops))) as pool:
        return list(pool.map(one, ops))


def raise_first(results: list[Any]) -> list[Any]:
    """`results` (of parallel() or wait_all()) unchanged, or the first exception among them raised."""
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def start_all(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """Start fn(item) for every item in parallel; the operations, or the first error raised."""
    return raise_first(parallel(fn, items))


def finish_all(clients: Clients, project: str, ops: Iterable[Any]) -> None:
    """Wait for every operation to end, then raise the first one's error, if any."""
    raise_first(wait_all(clients, project, ops))


def batch(clients: Clients, project: str, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """The batch idiom: start fn(item) for every item in parallel, wait for every operation that started,
    then raise the first error (a call's or an operation's). Waiting even after a failed call means
    that whatever the batch did create exists by the time the caller cleans up."""
    started = parallel(fn, items)
    ops = [r for r in started if not isinstance(r, BaseException)]
    failed = [r for r in started if isinstance(r, BaseException)]
    raise_first(failed + [e for e in wait_all(clients, project, ops) if e is not None])
    return ops


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], workers: int = MAX_PARALLEL) -> list[Any]:
    """Run fn over items on a bounded thread pool, preserving order; exceptions are returned, not raised."""
    items = list(items)
    if not items:
        return []

    def guarded(item: Any) -> Any:
        try:
            return fn(item)
        except Exception as e:
            return e

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(guarded, items))
