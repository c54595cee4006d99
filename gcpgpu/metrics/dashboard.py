"""`gcpgpu metrics dashboard create|delete`: a Cloud Monitoring dashboard per cluster, from a template.

The dashboard carries the label gcpgpu-cluster=NAME, so it is found again from GCP alone: `create`
updates the cluster's dashboard when there is one (its charts name the current nodes) instead of
making a second, and `delete` (which `cluster down` may call) removes whatever carries the label.
"""

from __future__ import annotations

import json
from typing import Any

from gcpgpu.resources import render

from .sources import NAMESPACE
from .target import Target

LABEL = "gcpgpu-cluster"
TEMPLATE = "dashboard.json.j2"


def dashboard_json(target: Target) -> dict[str, Any]:
    """The dashboard for a cluster, as the JSON the API (and `gcloud monitoring dashboards`) takes."""
    machine = target.machine
    text = render(TEMPLATE, cluster=target.name, project=target.project,
                  instance_ids=[m.key for m in target.members],
                  machine_type=machine.name if machine else (target.members[0].machine_type or "unknown"),
                  max_net_gbps=machine.max_net_gbps if machine else "?", trainer_namespace=NAMESPACE["cluster"],
                  # The NICs' own counters: on a machine with no GPU NICs the host NIC carries the collectives.
                  fabric_role="fabric" if machine is not None and machine.gpu_nics else "host",
                  rdma=machine is not None and machine.gpudirect == "rdma")
    return json.loads(text)


def find(clients: Any, project: str, cluster: str) -> list[Any]:
    """The dashboards labelled for this cluster (one ListDashboards, paged)."""
    pager = clients.dashboards().list_dashboards(request={"parent": f"projects/{project}", "page_size": 1000})
    return [d for d in pager if d.labels.get(LABEL) == cluster]


def console_url(name: str) -> str:
    project, dash_id = name.split("/")[1], name.rsplit("/", 1)[-1]
    return f"https://console.cloud.google.com/monitoring/dashboards/builder/{dash_id}?project={project}"


def create(clients: Any, target: Target) -> dict[str, str]:
    """Create the cluster's dashboard, or bring the existing one up to date."""
    from google.cloud import monitoring_dashboard_v1

    body = monitoring_dashboard_v1.Dashboard.from_json(json.dumps(dashboard_json(target)))
    existing = find(clients, target.project, target.name)
    client = clients.dashboards()
    if existing:
        body.name, body.etag = existing[0].name, existing[0].etag
        made = client.update_dashboard(request={"dashboard": body})
        action = "updated"
    else:
        made = client.create_dashboard(request={"parent": f"projects/{target.project}", "dashboard": body})
        action = "created"
    return {"cluster": target.name, "dashboard": made.name, "action": action, "url": console_url(made.name)}


def delete(clients: Any, project: str, cluster: str) -> list[str]:
    """Delete every dashboard labelled for the cluster; returns their names (none is not an error)."""
    from google.api_core import exceptions

    gone = []
    for d in find(clients, project, cluster):
        try:
            clients.dashboards().delete_dashboard(request={"name": d.name})
        except exceptions.NotFound:
            pass  # someone else deleted it meanwhile: the outcome we wanted
        gone.append(d.name)
    return gone
