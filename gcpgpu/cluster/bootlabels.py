"""Rank labels sent while the nodes are created and boot, off `up`'s critical path.

A cluster of N nodes needs N instances.setLabels calls (Compute has no bulk setLabels). Sent one
after the other and each operation waited on, they were the longest step of a 1,024-node `up`.
Here they go out, in parallel, as soon as the bulkInsert call has returned and the new VMs are
listed, while bulkInsert's own operation and the boot run; nobody waits on their operations. The
list taken once the nodes are RUNNING shows whether each label landed; only an operation whose
label does not show yet is waited on (its error raised).

A new cluster gets its final ranks in that one pass: when every VM already reports its place in
the fabric (physicalHostTopology), ranks follow sub-blocks and blocks at once (topology_order),
so `rank_by_topology` finds nothing left to move. Nodes added to an existing cluster get their
name's number, as before, and the fabric order is settled after RUNNING.
"""

from __future__ import annotations

import threading
from typing import Any

from gcpgpu.gcp.operations import parallel

from .lease import LeaseLost
from .names import LABEL_RANK, rank_of
from .observe import LABEL_FIELDS, ROW_FIELDS, Node, observe_nodes
from .plan import Plan
from .ranks import send_label
from .session import Session
from .topology import topology_order

# setLabels calls in flight at once: enough that 1,000 calls at 100 ms each take about as long as
# bulkInsert's operation.
SEND_PARALLEL = 64


class _Stopped(Exception):
    pass


class BootLabels:
    """The rank labels of one `up` attempt's new nodes (`names`). `fabric`: the cluster is new, so
    every node's rank may follow the fabric from the start."""

    def __init__(self, session: Session, plan: Plan, names: list[str], fabric: bool) -> None:
        self.s, self.plan, self.names, self.fabric = session, plan, list(names), fabric
        self.ranks: dict[str, int] | None = None  # decided once, from one list of every new node
        self.sent: dict[str, tuple[str, Any]] = {}  # node -> (rank label sent, its operation or None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ during the placement
    def start(self) -> None:
        """Right after the bulkInsert call: label the new nodes in the background."""
        self.s.report.step("labels", f"Labelling {len(self.names)} node(s) with their rank while they boot")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rank-labels", daemon=True)
        self._thread.start()

    def abandon(self) -> None:
        """The placement failed: stop sending and forget what was sent (the zone is cleaned next)."""
        self._stop.set()
        self._join()
        self.ranks, self._error = None, None
        self.sent.clear()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            self._send(observe_nodes(self.s.clients, self.s.project, self.plan.name, LABEL_FIELDS), wait=False)
        except _Stopped:
            pass
        except BaseException as e:  # raised on the main thread by settle()
            self._error = e

    def _decide(self, nodes: list[Node]) -> bool:
        """Fix every new node's rank from one list that shows them all; False if some are not listed yet."""
        if self.ranks is not None:
            return True
        mine = {n.name: n for n in nodes if n.name in set(self.names)}
        if len(mine) < len(self.names):
            return False
        by_name = sorted(mine.values(), key=lambda n: rank_of(self.plan.name, n.name) or 0)
        if self.fabric and all(n.block for n in by_name):
            self.ranks = {n.name: rank for rank, n in enumerate(topology_order(by_name))}
        else:
            self.ranks = {n.name: rank_of(self.plan.name, n.name) or 0 for n in by_name}
        return True

    def _send(self, nodes: list[Node], wait: bool) -> None:
        if not self._decide(nodes):
            return  # not every VM is listed yet: settle() labels them once bulkInsert is done
        assert self.ranks is not None
        todo = [(n, {**n.labels, LABEL_RANK: str(self.ranks[n.name])}) for n in nodes
                if n.name in self.ranks and n.name not in self.sent]
        if not todo:
            return
        if wait:
            self.s.batch(lambda item: send_label(self.s, *item), todo)
            self.sent.update({n.name: (labels[LABEL_RANK], None) for n, labels in todo})
            return

        def one(item: tuple[Node, dict[str, str]]) -> Any:
            if self._stop.is_set():
                raise _Stopped
            return send_label(self.s, *item)

        for (node, labels), got in zip(todo, parallel(one, todo, workers=SEND_PARALLEL), strict=True):
            if isinstance(got, (LeaseLost, _Stopped)):
                raise got
            if not isinstance(got, BaseException):
                self.sent[node.name] = (labels[LABEL_RANK], got)
            # A call that failed (the VM not ready for it yet, a 503 past its retries) is sent again by settle().

    # ------------------------------------------------------------------ after the placement
    def settle(self) -> None:
        """The placement succeeded: label (and wait on) whatever was not sent during it."""
        if self._thread is None and not self.sent:
            self.s.report.step("labels", f"Labelling {len(self.names)} node(s) with their rank")
        self._join()
        if self._error is not None:
            raise self._error
        if len(self.sent) < len(self.names):
            self._send(observe_nodes(self.s.clients, self.s.project, self.plan.name, LABEL_FIELDS), wait=True)

    def confirm(self, nodes: list[Node]) -> list[Node]:
        """`nodes` (listed once RUNNING), after waiting on the label operations whose labels do not
        show in them yet (raising the first error), listed again if any had to be waited on."""
        late = [self.sent[n.name][1] for n in nodes
                if n.name in self.sent and self.sent[n.name][1] is not None
                and n.labels.get(LABEL_RANK) != self.sent[n.name][0]]
        if not late:
            return nodes
        self.s.finish(late)
        want = {n.name for n in nodes}
        return [n for n in observe_nodes(self.s.clients, self.s.project, self.plan.name, ROW_FIELDS)
                if n.name in want]
