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
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import call, retrying, wait

KEY_PREFIX = "gcpgpu-recovery-"


def key(cluster: str) -> str:
    return f"{KEY_PREFIX}{cluster}"


def _read(clients: Clients, project: str) -> tuple[str, list[dict[str, str]]]:
    proj = retrying()(clients.compute("ProjectsClient").get)(project=project)
    md = proj.common_instance_metadata
    return md.fingerprint, [{"key": i.key, "value": i.value} for i in md.items]


def read(clients: Clients, project: str, cluster: str) -> dict[str, Any] | None:
    """The pending recovery of `cluster`'s job (the next attempt's record), or None."""
    _fp, items = _read(clients, project)
    raw = next((i["value"] for i in items if i["key"] == key(cluster)), None)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "id" in value else None


def put(clients: Clients, project: str, cluster: str, value: dict[str, Any] | None,
        fence: Callable[[], None] = lambda: None) -> None:
    """Write (or, with None, remove) the pending recovery; `fence()` right before each write (the lease)."""
    from google.cloud import compute_v1

    for _ in range(50):
        fp, items = _read(clients, project)
        rest = [i for i in items if i["key"] != key(cluster)]
        if value is None and len(rest) == len(items):
            return
        if value is not None:
            rest.append({"key": key(cluster), "value": json.dumps(value, sort_keys=True)})
        fence()
        body = compute_v1.Metadata(fingerprint=fp, items=[compute_v1.Items(**i) for i in rest])
        try:
            op = call(clients.compute("ProjectsClient").set_common_instance_metadata,
                      {"project": project, "metadata_resource": body})
            wait(clients, project, op)
            return
        except Exception as e:
            if getattr(e, "code", None) != 412:  # another writer won the race: read again
                raise
        time.sleep(0.05)
    raise CloudError(f"could not record the recovery of cluster {cluster}'s job: project metadata keeps changing")
