"""Stall detection for a followed cluster job (job submit --stall-timeout).

Progress is what the job writes to its log (Cloud Logging, read as `job logs --follow` reads it):
for the bundled trainer a new step line ("step N | loss ..."), for a user's command any line. When
no node has made progress for the timeout while the job is RUNNING, the job has stalled (an NCCL
collective that never returns, a dead data loader). The suspect node is the one whose step lags the
others, else the one that has been silent longest (a node that never wrote counts as silent from
the start, and the first such node in rank order is named).

Before the job is stopped, capture() asks each node's agent (metadata gcpgpu-job-dump) for what
helps: py-spy stacks of the container's Python processes, written into the job's log, or a line
saying py-spy is absent from the image; and NCCL's flight recorder when the job turned it on
(TORCH_NCCL_TRACE_BUFFER_SIZE). Each agent answers in its guest attributes (dump, nccl-trace).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from gcpgpu.cluster.observe import guest_attributes
from gcpgpu.errors import CloudError
from gcpgpu.gcp import clock as cloud_clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs import ids
from gcpgpu.jobs import logs as job_logs
from gcpgpu.times import parse_timestamp

from . import nodes

STEP = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)?step\s+(\d+) \| loss ")
CAPTURE_WAIT_S = 30.0  # an agent looks at its metadata every 5 s; py-spy takes a second or two


class Watch:
    """Per node: the last step (trainer) and when its progress was last seen, from the job's log."""

    def __init__(self, clients: Clients, project: str, jid: ids.JobId, timeout_s: float, trainer: bool,
                 clock: Callable[[], float] = cloud_clock.monotonic) -> None:
        self.clients, self.project, self.timeout_s, self.trainer, self.clock = clients, project, timeout_s, trainer, clock
        self.flt = nodes.log_filter(project, jid)
        self._seen: set[str] = set()
        self._since: str | None = None
        self.reset()

    def reset(self) -> None:
        """A new attempt: its clock starts when it is first seen RUNNING (the log's old lines stay read)."""
        self.started: float | None = None
        self.progress_at: float | None = None
        self.steps: dict[str, int] = {}
        self.last_line: dict[str, float] = {}  # node -> the log's timestamp of its newest line

    def poll(self, nodes: list[str]) -> str | None:
        """The suspect node's name when the job has stalled, else None (reads the log's new entries)."""
        now = self.clock()
        if self.started is None:
            self.started = now
        try:
            fresh = list(job_logs.entries(self.clients, self.project, self.flt, self._since))
        except CloudError:
            return None  # an unreadable log is no evidence of a stall
        for entry in fresh:
            key = entry.get("insertId") or f"{entry.get('timestamp')}|{job_logs.message(entry)}"
            if key in self._seen:
                continue
            self._seen.add(key)
            self._since = entry.get("timestamp") or self._since
            node, text = job_logs.tag(entry), job_logs.message(entry)
            self.last_line[node] = parse_timestamp(entry.get("timestamp")) or time.time()
            if not self.trainer:
                self.progress_at = now
            elif m := STEP.match(text.strip()):
                step = int(m.group(1))
                if step > self.steps.get(node, -1):
                    self.steps[node] = step
                    self.progress_at = now
        if now - (self.progress_at or self.started) < self.timeout_s:
            return None
        return self.suspect(nodes)

    def suspect(self, nodes: list[str]) -> str | None:
        """The node whose step lags, else the first silent one (oldest newest line; never wrote: first)."""
        stepping = {n: s for n, s in self.steps.items() if n in nodes}
        if len(set(stepping.values())) > 1:
            return min(stepping, key=lambda n: (stepping[n], nodes.index(n)))
        if not nodes:
            return None
        return min(nodes, key=lambda n: (self.last_line.get(n, float("-inf")), nodes.index(n)))


def capture(clients: Clients, project: str, jid: ids.JobId, wait_s: float = CAPTURE_WAIT_S,
            poll_s: float = 1.0) -> dict[str, str]:
    """Ask every running node of the job for stacks (and NCCL's flight recorder); {node: what it said}."""
    held = nodes.job_nodes(clients, project, jid)
    run = nodes.newest(held).run_key
    mine = [(n, j) for n, j in held if n.status == "RUNNING"]
    try:
        nodes.ask(clients, project, mine, nodes.DUMP_KEY)
    except CloudError as e:
        return {"*": f"capture not requested: {e}"}
    said: dict[str, str] = {}
    deadline = cloud_clock.monotonic() + wait_s
    while True:
        for node, _job in mine:
            if node.name not in said:
                attrs = guest_attributes(clients, project, node)
                if attrs.get("job-id") == run and attrs.get("dump"):
                    trace = attrs.get("nccl-trace")
                    said[node.name] = {"py-spy": "py-spy stacks in the job's log",
                                       "absent": "py-spy absent from the image"}.get(attrs["dump"], attrs["dump"]) \
                        + (f"; NCCL flight recorder {trace}" if trace else "")
        if len(said) == len(mine) or cloud_clock.monotonic() >= deadline:
            break
        cloud_clock.sleep(poll_s)
    for node, _job in mine:
        said.setdefault(node.name, "no answer from its agent")
    return said
