"""A job's log: Cloud Logging entries (entries.list over REST), printed as `[task] message`.

Vertex AI writes each replica's output as resource ml_job; the cluster agent's containers write
theirs through Docker's gcplogs driver. Either way the job's id picks its entries (vertex.log_filter,
cluster.log_filter); --follow polls for newer ones until the job has ended.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

PAGE = 1000
POLL_S = 2.0


def entries(clients: Clients, project: str, flt: str, since: str | None = None) -> Iterator[dict]:
    """Entries matching `flt` (newer than or at `since`, an RFC 3339 time), oldest first, every page."""
    session, base = clients.logging_session()
    query = flt + (f' AND timestamp>="{since}"' if since else "")
    token = None
    while True:
        body = {"resourceNames": [f"projects/{project}"], "filter": query, "orderBy": "timestamp asc",
                "pageSize": PAGE}
        if token:
            body["pageToken"] = token
        response = session.post(f"{base}/v2/entries:list", json=body, timeout=60)
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:200]
            raise CloudError(f"reading the job's log failed: {response.status_code} {message}")
        data = response.json()
        yield from data.get("entries", [])
        token = data.get("nextPageToken")
        if not token:
            return


def tag(entry: dict) -> str:
    """Which replica or node wrote the entry: workerpool0-0, a node's name, or 'service'."""
    labels = entry.get("labels") or {}
    resource = (entry.get("resource") or {}).get("labels") or {}
    payload = entry.get("jsonPayload") or {}
    return (labels.get("ml.googleapis.com/task_name") or resource.get("task_name")
            or (payload.get("instance") or {}).get("name") or "service")


def message(entry: dict) -> str:
    payload = entry.get("jsonPayload") or {}
    return str(payload.get("message", entry.get("textPayload", "")))


def record(entry: dict) -> dict:
    """One entry as `job logs --format json` prints it."""
    return {"time": entry.get("timestamp"), "task": tag(entry), "severity": entry.get("severity", "DEFAULT"),
            "message": message(entry)}


def stream(clients: Clients, project: str, flt: str, show: Callable[[dict], None], *, follow: bool,
           finished: Callable[[], bool], poll_s: float = POLL_S) -> int:
    """Show every entry once; with follow, keep polling until `finished()` and one last read. Returns the count."""
    seen: set[str] = set()
    since = None
    count = 0
    while True:
        done = not follow or finished()  # asked before reading: what was written before the end is read
        for entry in entries(clients, project, flt, since):
            key = entry.get("insertId") or f"{entry.get('timestamp')}|{message(entry)}"
            if key in seen:
                continue
            seen.add(key)
            since = entry.get("timestamp") or since
            show(entry)
            count += 1
        if done:
            return count
        time.sleep(poll_s)


# What a launcher says after a worker failed: true, but never the cause.
_LAUNCHER_NOISE = re.compile(r"ChildFailedError|a worker failed|^Root Cause|^Traceback \(most recent call last\)|"
                             r"^=+$|^-+$|^\[\d+\]:$|^\s|^Failures:$|^\S+ FAILED$|^<NO_OTHER_FAILURES>$|"
                             r"^[EWI]\d{4} .*\] failed \(exitcode: -?\d+\)")
# torchrun's report of a worker that died of SIGKILL (what the kernel's OOM killer sends): its table's
# "rank : R" line, then "exitcode : -9" or the traceback line it writes for a signal.
_TABLE_RANK = re.compile(r"^rank\s*:\s*(\d+)")
_SIGKILLED = re.compile(r"^exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\) received by PID")
KILLED = "killed (out of memory?)"
# torchrun and Vertex may prefix a worker's lines: "[rank0]: ", "[default0]:", "I1123 05:00:00.1 123 x.py:1] ".
_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)")
_TRAINER_ERROR = re.compile(r"^gcpgpu\.trainer: (?:rank \d+: )?error: ")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)(?::\s|$)")
_PEER_FAILED = re.compile(r"^gcpgpu\.trainer: rank \d+: a collective failed")
# The image's entrypoint refusing to start the command (gcpgpu/node/workspace.py, gcpgpu/node/launch.py): a failed --setup
# (its own output may hold an exception line: this one says what ended the replica), the job's code, mounts or
# secrets it could not bring, a command it could not run. Its notes ("setup: ...", "warning: ...") are not causes.
_ENTRYPOINT_REFUSAL = re.compile(r"^gcpgpu-entrypoint: (?:setup failed \(exit \d+\): |GCPGPU_[A-Z_]+: |"
                                 r"secret [A-Za-z_]\w* \(|cannot run )")


def entrypoint_refusal(line: str) -> bool:
    """True for the image's entrypoint refusing to start the command (a failed --setup, code, mounts or secrets
    it could not bring, a command it could not run): a cause, unlike its notes."""
    return bool(_ENTRYPOINT_REFUSAL.match(_PREFIX.sub("", line.rstrip())))


def launcher_noise(line: str) -> bool:
    """True for what a launcher prints around a worker's failure (banners, its own report), not the cause."""
    text = _PREFIX.sub("", line.rstrip())
    return not text or bool(_LAUNCHER_NOISE.search(text))


def first_error_line(lines: Iterable[str]) -> str | None:
    """The first line of a job's output that names why it failed, or None (first_error, without where)."""
    return first_error((None, raw) for raw in lines)


def first_error(lines: Iterable[tuple[str | None, str]]) -> str | None:
    """Why a job failed, from its output as (where, line) pairs (where: the node or task that wrote it), or None.

    The trainer's own one-line errors ('gcpgpu.trainer: error: ...') and Python exceptions
    ('ValueError: ...') count; what a launcher adds after a worker died (torchrun's
    ChildFailedError report, 'a worker failed') does not. A rank's note that a collective failed
    because a peer died counts only when nothing else was said: the peer's own error is the cause.
    A worker torchrun reports killed by SIGKILL (the OOM killer's signal: it prints nothing itself) is
    the cause, named with its rank and where it ran, over any of those, which its death sets off. The
    entrypoint's refusal (a failed --setup, code, mounts or secrets it could not bring) wins over all.
    """
    peer = found = None
    after = 0  # lines read since `found`: a setup's refusal follows its output closely, so a page is enough
    ranks: dict[str | None, str] = {}  # the rank torchrun's report names last, per writer
    for where, raw in lines:
        for text in str(raw).splitlines():
            line = _PREFIX.sub("", text.rstrip())
            if found is not None:
                after += 1
                if after > PAGE:
                    return found  # stop reading a long log's later pages
            if m := _TABLE_RANK.match(line.strip()):
                ranks[where] = m.group(1)
            if _SIGKILLED.search(line.strip()):
                rank = ranks.get(where)
                return (f"{KILLED}: {'rank ' + rank if rank else 'a worker'}" + (f" on {where}" if where else "")
                        + " got SIGKILL")
            if not line or _LAUNCHER_NOISE.search(line):
                continue
            if _ENTRYPOINT_REFUSAL.match(line):
                return line[:500]
            if found is None and (_TRAINER_ERROR.match(line) or _EXCEPTION.match(line)):
                found = line[:500]
            if peer is None and _PEER_FAILED.match(line):
                peer = line[:500]
    return found or peer


def failure_cause(clients: Clients, project: str, flt: str) -> str | None:
    """Why a failed job failed, from its log (entries.list; first_error), or None when the log does not say."""
    return first_error((tag(entry), message(entry)) for entry in entries(clients, project, flt))


def peer_failure(message: str | None) -> bool:
    """True when a node's last words say only that a peer died (the trainer's collective error): it follows the
    node that set it off and is never the one to name."""
    return bool(message) and bool(_PEER_FAILED.match(_PREFIX.sub("", str(message))))


def killed_node(per_node: Iterable[dict]) -> str | None:
    """A cluster job's cause when a node's container itself died of SIGKILL (exit -9, Docker's 137), as its
    agent reports it (its log then holds no report of it), or None."""
    for row in per_node:
        if row.get("state") == "FAILED" and str(row.get("message") or "").startswith(KILLED):
            return f"{row['message']} on {row['node']} (rank {row['rank']})"
    return None


# The trainer's progress as it prints it (rank 0): "step      9 | loss 10.8485 | lr 4.22e-04 | 226 tok/s/gpu | ...".
_STEP = re.compile(r"^step\s+(\d+) \| loss (\S+) \|.*?\| ([^|]+ tok/s/gpu)")
# The trainer's own notes worth seeing live: its start line, checkpoints, a stop and its summary.
_NOTE = re.compile(r"^(?:gcpgpu\.trainer: (?!(?:rank \d+: )?error: )|saved checkpoint |resumed from |no checkpoint in )")


def progress_line(text: str) -> str | None:
    """A trainer log line as a short progress line ("step 9 | loss 10.8485 | 226 tok/s/gpu"), or None
    for lines that are not progress (errors are quoted once the job has failed)."""
    line = _PREFIX.sub("", text.strip())
    if m := _STEP.match(line):
        return f"step {m.group(1)} | loss {m.group(2)} | {m.group(3).strip()}"
    if _NOTE.match(line) and "a collective failed" not in line:
        return line.removeprefix("gcpgpu.trainer: ")
    return None


# gcpgpu's own notes beside a user's command in its log (the emulator's start line, the entrypoint's): not the
# command's output. The entrypoint's refusals are, since they end it.
_OWN_NOTE = re.compile(r"^gcpgpu(?:-entrypoint| emulator): ")

Say = Callable[[str, "float | None"], None]  # (line, the time its entry was written, seconds since the epoch)


class Progress:
    """Shows the job's progress from its log while something else follows the job's state: the bundled
    trainer's progress lines, or every line a user's own command writes, each after its writer (`label`: its
    rank). Each line is said with the time its entry was written, so a backlog read on joining late keeps
    its own times.

    A daemon thread polls the log every `poll_s` (the way `job logs --follow` reads it); drain() reads
    what is left, so the last lines show before the job's final state does. `user` says (asked once, when the
    log first has entries: the job's record exists by then) whether the job runs a user's command. A log that
    cannot be read (no permission, say) only ends the progress lines: the job's state is still followed.
    """

    def __init__(self, clients: Clients, project: str, flt: str, say: Say, poll_s: float = POLL_S,
                 user: Callable[[], bool] = lambda: False, label: Callable[[str], str] = lambda where: where) -> None:
        self.clients, self.project, self.flt, self.say, self.poll_s = clients, project, flt, say, poll_s
        self.user, self.label = user, label
        self._user: bool | None = None
        self._seen: set[str] = set()
        self._since: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="job-progress", daemon=True)
        self.failed = False

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 5)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.drain()

    def drain(self) -> None:
        """Read the log's new entries and show the progress among them."""
        from gcpgpu.times import parse_timestamp

        with self._lock:
            if self.failed:
                return
            try:
                for entry in entries(self.clients, self.project, self.flt, self._since):
                    key = entry.get("insertId") or f"{entry.get('timestamp')}|{message(entry)}"
                    if key in self._seen:
                        continue
                    self._seen.add(key)
                    self._since = entry.get("timestamp") or self._since
                    if self._user is None:
                        self._user = bool(self.user())
                    at = parse_timestamp(entry.get("timestamp"))
                    for line in self._shown(entry):
                        self.say(line, at)
            except CloudError:
                self.failed = True

    def _shown(self, entry: dict) -> list[str]:
        """The entry's lines to show: a user command's every line but gcpgpu's notes, after its writer; the
        trainer's progress lines."""
        if not self._user:
            line = progress_line(message(entry))
            return [line] if line else []
        where = self.label(tag(entry))
        return [f"[{where}] {text}" for text in message(entry).splitlines()
                if text.strip() and (not _OWN_NOTE.match(text) or entrypoint_refusal(text))]
