"""Clients other than google-cloud-compute against the emulator: the discovery-based
googleapiclient (SkyPilot, Ray) and gcloud, and resources created by one seen by the others."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httplib2
import pytest
from googleapiclient import discovery
from googleapiclient.errors import HttpError
from googleapiclient.http import BatchHttpRequest

from gcpgpu.fakes.server import Emulator

from .builders import IMAGE, PROJECT, ZONE

GCLOUD = shutil.which("gcloud")


def _discovery(emu: Emulator) -> Any:
    """compute v1 from the discovery document shipped inside googleapiclient, with no credentials."""
    return discovery.build("compute", "v1", http=httplib2.Http(timeout=30), static_discovery=True,
                           client_options={"api_endpoint": f"{emu.url}/compute/v1/"})


def _body(name: str, labels: dict[str, str] | None = None) -> dict:
    return {
        "name": name,
        "machineType": f"zones/{ZONE}/machineTypes/e2-standard-4",
        "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"sourceImage": IMAGE}}],
        "networkInterfaces": [{"network": "global/networks/default", "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}],
        "labels": labels or {},
    }


def test_googleapiclient_insert_list_delete(gcp: Emulator) -> None:
    gcp.faults.operation_seconds = 0.2
    svc = _discovery(gcp)
    op = svc.instances().insert(project=PROJECT, zone=ZONE, body=_body("disco-1", {"via": "discovery"})).execute()
    assert op["kind"] == "compute#operation" and op["status"] != "DONE"
    done = svc.zoneOperations().wait(project=PROJECT, zone=ZONE, operation=op["name"]).execute()
    assert done["status"] == "DONE" and "error" not in done
    listed = svc.instances().list(project=PROJECT, zone=ZONE, filter="labels.via = discovery").execute()
    assert [i["name"] for i in listed["items"]] == ["disco-1"]
    assert listed["items"][0]["networkInterfaces"][0]["accessConfigs"][0]["natIP"]
    agg = svc.instances().aggregatedList(project=PROJECT).execute()
    assert [i["name"] for i in agg["items"][f"zones/{ZONE}"]["instances"]] == ["disco-1"]
    op = svc.instances().delete(project=PROJECT, zone=ZONE, instance="disco-1").execute()
    svc.zoneOperations().wait(project=PROJECT, zone=ZONE, operation=op["name"]).execute()
    assert "items" not in svc.instances().list(project=PROJECT, zone=ZONE).execute()


def test_googleapiclient_paging_and_errors(gcp: Emulator) -> None:
    svc = _discovery(gcp)
    for i in range(5):
        svc.instances().insert(project=PROJECT, zone=ZONE, body=_body(f"p-{i}")).execute()
    names, request = [], svc.instances().list(project=PROJECT, zone=ZONE, maxResults=2)
    while request is not None:
        page = request.execute()
        names += [i["name"] for i in page.get("items", [])]
        request = svc.instances().list_next(request, page)
    assert names == [f"p-{i}" for i in range(5)]
    with pytest.raises(HttpError) as e:
        svc.instances().get(project=PROJECT, zone=ZONE, instance="ghost").execute()
    assert e.value.status_code == 404 and e.value.error_details[0]["reason"] == "notFound"
    with pytest.raises(HttpError) as e:
        svc.instances().insert(project=PROJECT, zone=ZONE, body=_body("p-0")).execute()
    assert e.value.status_code == 409 and e.value.error_details[0]["reason"] == "alreadyExists"


def test_googleapiclient_batch(gcp: Emulator) -> None:
    """Google's HTTP batch endpoint, which gcloud uses for several VMs at once."""
    svc = _discovery(gcp)
    results: dict[str, tuple[Any, Any]] = {}
    batch = BatchHttpRequest(callback=lambda rid, resp, exc: results.__setitem__(rid, (resp, exc)),
                             batch_uri=f"{gcp.url}/batch/compute/v1")
    batch.add(svc.instances().insert(project=PROJECT, zone=ZONE, body=_body("batched-1")), request_id="a")
    batch.add(svc.instances().insert(project=PROJECT, zone=ZONE, body=_body("batched-2")), request_id="b")
    batch.add(svc.instances().get(project=PROJECT, zone=ZONE, instance="never"), request_id="c")
    batch.execute(http=httplib2.Http(timeout=30))
    assert results["a"][0]["operationType"] == "insert" and results["a"][1] is None
    assert results["b"][0]["targetLink"].endswith("/batched-2")
    assert isinstance(results["c"][1], HttpError) and results["c"][1].status_code == 404
    assert sorted(i["name"] for i in svc.instances().list(project=PROJECT, zone=ZONE).execute()["items"]) == [
        "batched-1", "batched-2"]


def _gcloud_config(emu: Emulator, root: Path) -> dict[str, str]:
    """A scratch gcloud configuration aimed at the emulator: what the `gcloud config set` commands
    below write, written directly to spare five 1-second gcloud calls.

        gcloud config set auth/disable_credentials true
        gcloud config set api_endpoint_overrides/compute http://127.0.0.1:PORT/compute/v1/
        gcloud config set core/project PROJECT
        gcloud config set core/disable_usage_reporting true
        gcloud config set component_manager/disable_update_check true
    """
    (root / "configurations").mkdir(parents=True)
    (root / "active_config").write_text("default")
    (root / "configurations" / "config_default").write_text(
        "[auth]\ndisable_credentials = true\n\n"
        f"[api_endpoint_overrides]\ncompute = {emu.url}/compute/v1/\n\n"
        f"[core]\nproject = {PROJECT}\ndisable_usage_reporting = true\n\n"
        "[component_manager]\ndisable_update_check = true\n"
    )
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "GOOGLE_"))}
    return {**keep, "CLOUDSDK_CONFIG": str(root), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}


def _gcloud(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([GCLOUD, *args, "--format=json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout or "null")


@pytest.mark.gcloud
@pytest.mark.skipif(GCLOUD is None, reason="gcloud is not installed")
def test_gcloud_round_trip_with_python_clients(gcp: Emulator, instances, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    env = _gcloud_config(gcp, tmp_path / "gcloud")
    batches: list[int] = []
    real_batch = gcp._batch

    def counting_batch(request: Any) -> Any:
        batches.append(1)
        return real_batch(request)

    monkeypatch.setattr(gcp, "_batch", counting_batch)

    # gcloud creates two VMs (one HTTP batch request carrying both inserts).
    created = _gcloud(env, "compute", "instances", "create", "gc-1", "gc-2", f"--zone={ZONE}",
                      "--machine-type=e2-standard-4", "--image-family=debian-12", "--image-project=debian-cloud",
                      "--labels=made-by=gcloud")
    assert sorted(i["name"] for i in created) == ["gc-1", "gc-2"]
    assert batches, "gcloud did not use the batch endpoint"

    # The Python client library sees them.
    seen = {i.name: i for i in instances.list(project=PROJECT, zone=ZONE)}
    assert sorted(seen) == ["gc-1", "gc-2"]
    assert seen["gc-1"].labels == {"made-by": "gcloud"} and seen["gc-1"].status == "RUNNING"

    # googleapiclient deletes one.
    svc = _discovery(gcp)
    svc.instances().delete(project=PROJECT, zone=ZONE, instance="gc-1").execute()

    # gcloud lists the one left (through aggregatedList).
    left = _gcloud(env, "compute", "instances", "list")
    assert [(i["name"], i["zone"].rsplit("/", 1)[-1]) for i in left] == [("gc-2", ZONE)]
