"""A recovery in progress, written where every follower can read it: one item of the project's metadata.

A recovery changes the cloud in steps (stop the survivors, delete the lost nodes, bring the cluster
back to size, put the job's next attempt on it). A follower can die between any two (a laptop
closed, the spot node the cloud-side follower ran on preempted). Before its first step that the
cloud alone cannot explain (deleting the lost nodes: afterwards no node says why the job stopped),
the recovery writes the next attempt's whole record here, key `gcpgpu-recovery-<cluster>`, and
removes it once that attempt is on the nodes. Whoever follows the job next finds it and finishes
the recovery from what the cloud shows, instead of reading the stopped survivors as a cancelled job.

Project metadata, as the lease: it outlives every node of the cluster (a recovery may replace them
all), every machine that may follow the job can read it, and writes are compare-and-swap by its
fingerprint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import call, retrying, wait

from .record import JobRecord

KEY_PREFIX = "gcpgpu-recovery-"


def key(cluster: str) -> str:
    return f"{KEY_PREFIX}{cluster}"


def items(clients: Clients, project: str) -> tuple[str, list[dict[str, str]]]:
    """The project's metadata: (fingerprint, [{key, value}]), one read (store.py reads it too)."""
    proj = retrying()(clients.compute("ProjectsClient").get)(project=project)
    md = proj.common_instance_metadata
    return md.fingerprint, [{"key": i.key, "value": i.value} for i in md.items]


def read(clients: Clients, project: str, cluster: str) -> JobRecord | None:
    """The pending recovery of `cluster`'s job (the next attempt's record, with `recovering`), or None."""
    return pending_in(items(clients, project)[1], cluster)


def pending_in(got: list[dict[str, str]], cluster: str) -> JobRecord | None:
    """The pending recovery of `cluster`'s job in project metadata items already read, or None."""
    return JobRecord.parse(next((i["value"] for i in got if i["key"] == key(cluster)), None))


def swap(clients: Clients, project: str, item: str, change: Callable[[str | None], str | None | bool],
         fence: Callable[[], None] = lambda: None, what: str = "the job's record") -> bool:
    """Compare-and-swap one project metadata item: change(current value or None) gives the new value,
    None to remove it, or False to leave it as it is. `fence()` runs right before each write. Returns
    whether it wrote."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    for _ in range(50):
        fp, got = items(clients, project)
        current = next((i["value"] for i in got if i["key"] == item), None)
        new = change(current)
        if new is False or (new is None and current is None) or new == current:
            return False
        rest = [i for i in got if i["key"] != item]
        if new is not None:
            rest.append({"key": item, "value": new})
        fence()
        body = compute.Metadata(fingerprint=fp, items=[compute.Items(**i) for i in rest])
        try:
            op = call(clients.compute("ProjectsClient").set_common_instance_metadata,
                      {"project": project, "metadata_resource": body})
            wait(clients, project, op)
            return True
        except Exception as e:
            if getattr(e, "code", None) != 412:  # another writer won the race: read again
                raise
        time.sleep(0.05)
    raise CloudError(f"could not write {what}: project metadata keeps changing")


def put(clients: Clients, project: str, cluster: str, value: JobRecord | None,
        fence: Callable[[], None] = lambda: None) -> None:
    """Write (or, with None, remove) the pending recovery; `fence()` right before each write (the lease)."""
    swap(clients, project, key(cluster),
         lambda _current: None if value is None else json.dumps(value.to_json(), sort_keys=True),
         fence, f"the recovery of cluster {cluster}'s job")
