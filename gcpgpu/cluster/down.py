"""`down` and `down --nodes N` (shrink), each as one attempt (a Session holding the cluster's lease).

down:   observe -> instances -> reservation -> placement policy -> firewalls -> NAT -> subnets ->
        networks (kinds.KINDS order), tolerating what is already gone; then observe again to prove it.
shrink: keep ranks 0..N-1 (whole sub-blocks, whatever their names), delete the rest, and write the
        new size into the kept nodes' metadata so `status` does not report the others as missing.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError, one_line

from . import holdings, munge, shared_fs, slurm_state
from .kinds import NODES
from .lease import LeaseLost
from .nat import settle as settle_nats
from .observe import Node, Observed, observe, observe_nodes
from .session import Session
from .teardown import delete_observed


def down(s: Session, name: str, keep_reservation: bool) -> Observed:
    """Delete everything of cluster `name`; what was found. Goes on past every failure, and raises one line
    per resource left at the end."""
    s.report.step("observe", f"Looking for resources of cluster {name} (by label, name and marker)")
    obs = observe(s.clients, s.project, name)
    obs.held = holdings.of_cluster(s.clients, s.project, name, obs.nodes)
    obs.scheduler = holdings.scheduler(obs.nodes, obs.held)
    if obs.empty:
        # Left by a `down` stopped after the nodes, or by an `up` that made nothing else (the munge key).
        lines = _after_nodes(s, name, slurm=None if not obs.held else obs.scheduler == "slurm")
        if not lines and not obs.held:
            # Nothing matched: down stays idempotent (exit 0, as terraform destroy: a second down, one after a
            # Ctrl-C), unless a cluster one edit away exists: then it was a typo, and exits 1 saying so.
            from .names import NoSuchCluster
            from .unknown import suggestion

            near = suggestion(s.clients, s.project, name)
            if near:
                raise NoSuchCluster(s.project, name, ": nothing was deleted", near)
            s.report.note(f"nothing to delete: no resources of cluster {name} in project {s.project}")
        _raise_left(name, lines)
        return obs
    s.report.note(f"found {obs.summary()}")
    todo = copy.copy(obs)
    if keep_reservation:
        todo.reservations = []
        if obs.reservations and obs.policies:
            # A kept reservation holds its placement policy: GCP refuses to delete a policy in use.
            s.report.note(f"keeping reservation(s) {', '.join(r['name'] for r in obs.reservations)} and the "
                          f"placement policy they use ({', '.join(p['name'] for p in obs.policies)})")
            todo.policies = []
    todo.routers, nat_notes = settle_nats(s.clients, s.project, name, obs)
    for line in nat_notes:
        s.report.note(line)
    with s.report.waiting(f"deleting cluster {name}"):
        lines = delete_observed(s.clients, s.project, todo, s.report.step, s.check_lease)
    lines += _after_nodes(s, name, slurm=obs.scheduler == "slurm")
    left = observe(s.clients, s.project, name)
    left.routers = [r for r in left.routers if r in todo.routers]  # a NAT kept for other VMs is not "left"
    if keep_reservation:
        left.reservations = []
        if obs.reservations:
            left.policies = []
    obs = copy.copy(obs)
    obs.routers = todo.routers  # what was deleted: a NAT kept for other VMs is not reported as gone
    named = " ".join(lines)
    lines += [f"{what} {n}: still exists after down" for what, n in left.names() if f" {n}" not in f" {named}"]
    _raise_left(name, lines)
    return obs


def _raise_left(name: str, lines: list[str]) -> None:
    if lines:
        raise CloudError(f"cluster {name}: {len(lines)} resource(s) could not be deleted; run "
                         f"'gcpgpu cluster down {name}' again once the cause is fixed:\n  " + "\n  ".join(lines))


def _after_nodes(s: Session, name: str, slurm: bool | None) -> list[str]:
    """What goes once the nodes are gone, each step tried whatever the one before did: the munge key (a
    Slurm cluster's; `slurm` None: not known, so looked for), the file systems (never an attached one), the
    Slurm state disk (after node 0, so no slurmctld writes to it). One line per resource left."""
    steps: list[tuple[str, Callable[[], list[str]]]] = [
        ("shared file systems", lambda: shared_fs.delete(s, name)),
        ("Slurm state disk", lambda: slurm_state.delete(s, name))]
    if slurm is not False:
        steps.insert(0, ("Slurm munge key", lambda: _munge(s, name)))
    lines: list[str] = []
    for what, step in steps:
        try:
            lines += step()
        except LeaseLost:
            raise
        except Exception as e:
            lines.append(f"{what}: {e if isinstance(e, CloudError) else one_line(e)}")
    return lines


# munge.py's refusal names Secret Manager's HTTP status: these are worth another try (gcp/errors.TRANSIENT_HTTP).
_TRANSIENT = re.compile(r"Secret Manager said (408|429|500|502|503|504)\b")


def _munge(s: Session, name: str, tries: int = 5) -> list[str]:
    """Delete the munge key (transient answers retried, backing off as gcp/operations.py does); [] when done."""
    from gcpgpu.gcp.operations import RETRY_INITIAL, RETRY_MAX

    delay = RETRY_INITIAL
    for attempt in range(tries):
        s.check_lease()
        try:
            if munge.delete_key(s.clients, s.project, name):
                s.report.step("munge", f"Deleted the Slurm munge key of cluster {name}")
            return []
        except CloudError as e:
            if attempt == tries - 1 or not _TRANSIENT.search(str(e)):
                return [f"Slurm munge key {munge.secret_id(name)}: {e}"]
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX)
    return []


def shrink(s: Session, name: str, nodes: int) -> list[Node]:
    """Keep ranks 0..nodes-1 and delete the rest; the shared resources stay. The nodes deleted."""
    found = observe_nodes(s.clients, s.project, name)
    gone = [n for n in found if n.rank is None or n.rank >= nodes]
    if not gone:
        s.report.note(f"cluster {name} has {len(found)} node(s): nothing to remove for --nodes {nodes}")
        return []
    s.report.step("instances", f"Deleting {len(gone)} node(s) beyond --nodes {nodes}: "
                               f"{', '.join(n.name for n in gone[:5])}{' ...' if len(gone) > 5 else ''}")
    with s.report.waiting("waiting for nodes to be deleted"):
        s.delete(NODES, [(n.zone, n.name) for n in gone])
    _set_size(s, [n for n in found if n not in gone], nodes)
    return gone


def _set_size(s: Session, kept: list[Node], nodes: int) -> None:
    """The kept nodes' `gcpgpu-nodes` metadata says the new size."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    def put(n: Node) -> Any:
        items = {**n.metadata, "gcpgpu-nodes": str(nodes)}
        return s.call(s.client("InstancesClient").set_metadata, {
            "project": s.project, "zone": n.zone, "instance": n.name,
            "metadata_resource": compute.Metadata(
                fingerprint=n.metadata_fingerprint,
                items=[compute.Items(key=k, value=v) for k, v in items.items()])})

    s.batch(put, kept)
