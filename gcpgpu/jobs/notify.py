"""Webhooks: one JSON message per change of a job's (or a cluster's) state, POSTed to each --notify URL.

Delivery never holds up or fails the job: messages queue for one background thread that POSTs them
in order, retrying a failed delivery (a connection error, a 5xx, 408 or 429) with exponential backoff,
and giving up on a message after its tries with one line on stderr. A message carries the job's
id, name, cluster, attempt and what happened (node, cause, steps redone); never the job's
environment, arguments, secrets' names or the webhook URLs themselves.

    {"event": "RECOVERING", "job": "cluster:c:train-1a2b3c", "name": "train", "cluster": "c",
     "attempt": 1, "at": "2026-11-25T04:30:00Z", "node": "c-1", "cause": "preempted", "last_step": 19}

Events: RUNNING, RECOVERING, RETRYING, STALLED, FAILED (with cause), SUCCEEDED, CANCELLED (cause "max spend"
when --max-spend stopped it, with spent_usd and max_spend_usd), SPEND_WARNING (80 % of --max-spend:
jobs/cluster/spendcap.py); and
AUTOSTOPPED, a cluster's, to the URLs of `cluster up --autostop D --notify URL` (or `cluster autostop
NAME D --notify URL`), sent by the leading node follower (gcpgpu/node/agent.py) through a Notifier like
the job's, right before it stops or deletes the cluster; it waits for delivery (bounded) only before
its own node goes:

    {"event": "AUTOSTOPPED", "cluster": "c", "action": "delete", "idle_since": "2026-11-25T04:00:00Z",
     "idle_s": 1800, "nodes": ["c-0", "c-1"], "at": "2026-11-25T04:30:00Z"}

The URLs are checked in gcpgpu/specfile.py (job and cluster alike) and never written to a log
(a failed delivery names scheme://host[:port] alone: specfile.webhook_host) or a message.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from gcpgpu.gcp import clock
from gcpgpu.specfile import webhook_host

from .state import RUNNING, JobState, is_final

TRIES = 5
BACKOFF_S = 1.0  # then 2, 4, 8 s: about 15 s in all before a message is dropped
TIMEOUT_S = 10.0
RETRYABLE_HTTP = (408, 429)
_DONE = object()


def message(event: str, **details: Any) -> dict:
    """A notification's body: the event, when, and the details given (None values left out)."""
    body = {"event": event, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    body.update({k: v for k, v in details.items() if v is not None})
    return body


def post(url: str, body: dict, timeout_s: float = TIMEOUT_S) -> bool | None:
    """POST `body` once: True when delivered, False when worth another try, None when not (a 4xx)."""
    data = json.dumps(body, sort_keys=True).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "gcpgpu"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s) checked at submit
            return 200 <= response.status < 300
    except urllib.error.HTTPError as e:
        return False if e.code >= 500 or e.code in RETRYABLE_HTTP else None
    except (OSError, ValueError):
        return False


class Notifier:
    """Delivers messages to `urls` from a background thread; send() returns at once."""

    def __init__(self, urls: list[str], tries: int | None = None, backoff_s: float | None = None,
                 **common: Any) -> None:
        self.urls = list(urls)
        self.tries = TRIES if tries is None else tries
        self.backoff_s = BACKOFF_S if backoff_s is None else backoff_s
        self.common = common  # what every message carries (job id, name, cluster)
        self.sent: list[dict] = []  # delivered (url, message) records, for `job status` and tests
        self.dropped = 0
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def send(self, event: str, **details: Any) -> None:
        if not self.urls:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gcpgpu-notify", daemon=True)
            self._thread.start()
        self._queue.put(message(event, **{**self.common, **details}))

    def close(self, wait_s: float = 30.0) -> None:
        """Let what is queued go out for at most `wait_s` (the follower is ending), then stop."""
        if self._thread is None:
            return
        self._queue.put(_DONE)
        self._thread.join(wait_s)
        self._stop.set()

    def _loop(self) -> None:
        while True:
            body = self._queue.get()
            if body is _DONE:
                return
            for url in self.urls:
                self._deliver(url, body)

    def _deliver(self, url: str, body: dict) -> None:
        delay = self.backoff_s
        for attempt in range(1, self.tries + 1):
            outcome = post(url, body)
            if outcome:
                self.sent.append({"url": url, **body})
                return
            if outcome is None or attempt == self.tries or clock.wait(self._stop, delay):
                break
            delay *= 2
        self.dropped += 1
        # scheme://host[:port] only: a path, a query or a user:token@ may hold the webhook's secret.
        print(f"gcpgpu: could not deliver the {body['event']} notification to {webhook_host(url)}", file=sys.stderr)


@contextlib.contextmanager
def state_changes(urls: list[str], **common: Any) -> Iterator[Callable[[JobState], None]]:
    """A callback for a follower that sees whole states (a Vertex job's): RUNNING and the end (with its
    error as the cause) are told; other states are Vertex's own steps. Queued messages go out on exit."""
    notifier = Notifier(urls, **common)

    def changed(state: JobState) -> None:
        if state.state == RUNNING or is_final(state.state):
            notifier.send(state.state, cause=state.error if state.state != RUNNING else None)

    try:
        yield changed
    finally:
        notifier.close()


def send(urls: list[str], event: str, wait_s: float = 30.0, **details: Any) -> Notifier:
    """One message to each of `urls`, waiting at most `wait_s` (a blocking one-off; the node agent's
    AUTOSTOPPED uses a Notifier, so the teardown goes on while it is delivered)."""
    notifier = Notifier(urls)
    notifier.send(event, **details)
    notifier.close(wait_s)
    return notifier
