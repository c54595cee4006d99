"""gcloud's compute commands, unchanged, against the emulator (`eval "$(gcpgpu emulator gcloud-env)"`).

Each command is one a user of the real cloud types; each assertion is what gcloud shows them there.
Skipped where gcloud is not installed.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")

PROJECT = "emulator-project"  # the project gcloud-env sets
ZONE = "us-central1-a"


def _ok(result: tuple[int, str, str]) -> str:
    rc, out, err = result
    assert rc == 0, err
    return out


def test_bulk_create_reports_its_vms_and_numbers_on_after_existing_ones(gcloud, gcp):
    out = _ok(gcloud(f"gcloud compute instances bulk create --name-pattern=bulk-#### --count=3 --zone={ZONE} "
                     "--machine-type=n1-standard-2 --image-family=rocky-linux-9 --image-project=rocky-linux-cloud"))
    assert out.split()[2:] == ["bulk-0001", ZONE, "bulk-0002", ZONE, "bulk-0003", ZONE]
    # A second batch with the same pattern starts after the biggest existing number (bulkInsert's doc).
    out = _ok(gcloud(f"gcloud compute instances bulk create --name-pattern=bulk-#### --count=2 --zone={ZONE} "
                     "--machine-type=e2-standard-4"))
    assert "bulk-0004" in out and "bulk-0005" in out
    listed = json.loads(_ok(gcloud(f"gcloud compute instances list --zones={ZONE} --format=json")))
    assert sorted(i["name"] for i in listed) == [f"bulk-000{n}" for n in range(1, 6)]
    assert {i["machineType"].rsplit("/", 1)[1] for i in listed} == {"n1-standard-2", "e2-standard-4"}
    # The group the bulk operation names holds one insert operation per VM.
    ops = json.loads(_ok(gcloud(f"gcloud compute operations list --zones={ZONE} --format=json")))
    groups = {o["operationGroupId"] for o in ops if o["operationType"] == "bulkInsert"}
    assert len(groups) == 2
    per_vm = [o for o in ops if o["operationType"] == "insert" and o.get("operationGroupId") in groups]
    assert len(per_vm) == 5


def test_bulk_create_below_min_count_shows_the_summary_code(gcloud, gcp):
    gcp.faults.set_capacity(ZONE, "a2-highgpu-1g", 1)
    # gcloud prints the failed operation's errors (its exit status here is 0: it reports, not raises).
    _rc, _out, err = gcloud(f"gcloud compute instances bulk create --name-pattern=gpu-## --count=3 --min-count=2 "
                           f"--zone={ZONE} --machine-type=a2-highgpu-1g --on-host-maintenance=TERMINATE")
    assert "VM_MIN_COUNT_NOT_REACHED" in err and "Requested minimum count of 2 VMs could not be created." in err
    assert json.loads(_ok(gcloud(f"gcloud compute instances list --zones={ZONE} --format=json"))) == []


def test_instance_templates_global_and_regional_and_vms_made_from_them(gcloud, gcp):
    _ok(gcloud("gcloud compute instance-templates create tpl --machine-type=e2-standard-4 "
               "--image-family=debian-12 --image-project=debian-cloud --labels=team=ml"))
    _ok(gcloud("gcloud compute instance-templates create rtpl --instance-template-region=us-central1 "
               "--machine-type=n2-standard-8"))
    listed = json.loads(_ok(gcloud("gcloud compute instance-templates list --format=json")))
    assert sorted(t["name"] for t in listed) == ["rtpl", "tpl"]
    _ok(gcloud(f"gcloud compute instances create one --zone={ZONE} --source-instance-template=tpl"))
    _ok(gcloud(f"gcloud compute instances create two --zone={ZONE} "
               "--source-instance-template=projects/emulator-project/regions/us-central1/instanceTemplates/rtpl"))
    out = _ok(gcloud(f"gcloud compute instances bulk create --name-pattern=t-# --count=2 --zone={ZONE} "
                     "--source-instance-template=tpl"))
    assert "t-1" in out and "t-2" in out
    got = {i["name"]: i for i in json.loads(_ok(gcloud(f"gcloud compute instances list --zones={ZONE} --format=json")))}
    assert got["one"]["labels"] == {"team": "ml"} and got["t-2"]["machineType"].endswith("/e2-standard-4")
    assert got["two"]["machineType"].endswith("/n2-standard-8")
    _ok(gcloud("gcloud compute instance-templates delete tpl --quiet"))
    rc, _out, err = gcloud("gcloud compute instance-templates describe tpl")
    assert rc != 0 and "was not found" in err


def test_deletion_protection_refuses_delete_until_lifted(gcloud, gcp):
    _ok(gcloud(f"gcloud compute instances create keep --zone={ZONE} --machine-type=e2-standard-4 "
               "--deletion-protection --no-address"))
    rc, _out, err = gcloud(f"gcloud compute instances delete keep --zone={ZONE} --quiet")
    assert rc != 0 and "Resource cannot be deleted if it's protected against deletion." in err
    _ok(gcloud(f"gcloud compute instances update keep --zone={ZONE} --no-deletion-protection"))
    _ok(gcloud(f"gcloud compute instances delete keep --zone={ZONE} --quiet"))
    assert json.loads(_ok(gcloud(f"gcloud compute instances list --zones={ZONE} --format=json"))) == []


def test_ordinary_machine_types_and_public_image_families(gcloud, gcp):
    mt = json.loads(_ok(gcloud(f"gcloud compute machine-types describe n1-standard-2 --zone={ZONE} --format=json")))
    assert (mt["guestCpus"], mt["memoryMb"]) == (2, 7680)  # n1: 3.75 GB per vCPU
    mt = json.loads(_ok(gcloud(f"gcloud compute machine-types describe e2-standard-4 --zone={ZONE} --format=json")))
    assert (mt["guestCpus"], mt["memoryMb"]) == (4, 16384)
    img = json.loads(_ok(gcloud("gcloud compute images describe-from-family rocky-linux-9 "
                                "--project=rocky-linux-cloud --format=json")))
    assert img["family"] == "rocky-linux-9" and img["status"] == "READY"
    rc, _out, err = gcloud("gcloud compute images describe-from-family rocky-linux-nine --project=rocky-linux-cloud")
    assert rc != 0 and "was not found" in err
    rc, _out, err = gcloud(f"gcloud compute instances create bad --zone={ZONE} --machine-type=n1-standard-3")
    assert rc != 0 and "n1-standard-3" in err


def test_regional_bulk_create_lands_in_a_zone_with_capacity_the_policy_allows(gcloud, gcp):
    gcp.faults.set_capacity("us-central1-a", "a2-highgpu-1g", 0)  # stocked out: the region's next zone takes them
    out = _ok(gcloud("gcloud compute instances bulk create --name-pattern=rb-## --count=2 --region=us-central1 "
                     "--machine-type=a2-highgpu-1g --on-host-maintenance=TERMINATE"))
    assert out.split()[2:6] == ["rb-01", "us-central1-b", "rb-02", "us-central1-b"]
    out = _ok(gcloud("gcloud compute instances bulk create --name-pattern=rc-## --count=1 --region=us-central1 "
                     "--machine-type=e2-standard-4 --location-policy=us-central1-a=deny,us-central1-b=deny"))
    assert "rc-01" in out and "us-central1-a" not in out and "us-central1-b" not in out
    ops = json.loads(_ok(gcloud("gcloud compute operations list --regions=us-central1 --format=json")))
    assert [o["operationType"] for o in ops] == ["bulkInsert", "bulkInsert"]


def _relabel_until_url_safe(instances, name: str) -> str:
    """Relabel `name` through the Python client until its label fingerprint holds '-' or '_'."""
    from google.cloud import compute_v1

    for i in range(200):
        fp = instances.get(project=PROJECT, zone=ZONE, instance=name).label_fingerprint
        if set(fp) & set("+/-_"):
            return fp
        instances.set_labels(project=PROJECT, zone=ZONE, instance=name, instances_set_labels_request_resource=(
            compute_v1.InstancesSetLabelsRequest(labels={"n": str(i)}, label_fingerprint=fp))).result()
    raise AssertionError("no label fingerprint with '+', '/', '-' or '_' in 200 tries")


def _remeta_until_url_safe(instances, projects, name: str) -> tuple[str, str]:
    """Rewrite the instance's and the project's metadata until both fingerprints hold '-' or '_'."""
    from google.cloud import compute_v1

    fps = ["", ""]
    for i in range(200):
        md = instances.get(project=PROJECT, zone=ZONE, instance=name).metadata
        common = projects.get(project=PROJECT).common_instance_metadata
        fps = [md.fingerprint, common.fingerprint]
        if all(set(fp) & set("+/-_") for fp in fps):
            return md.fingerprint, common.fingerprint
        items = [compute_v1.Items(key="n", value=str(i))]
        if not set(fps[0]) & set("+/-_"):
            instances.set_metadata(project=PROJECT, zone=ZONE, instance=name, metadata_resource=compute_v1.Metadata(
                fingerprint=md.fingerprint, items=items)).result()
        if not set(fps[1]) & set("+/-_"):
            projects.set_common_instance_metadata(project=PROJECT, metadata_resource=compute_v1.Metadata(
                fingerprint=common.fingerprint, items=items)).result()
    raise AssertionError(f"no metadata fingerprints with '+', '/', '-' or '_' in 200 tries: {fps}")


def test_label_and_metadata_edits_under_fingerprints_past_base64s_62nd_letter(gcloud, gcp):
    from gcpgpu.gcp.clients import Clients

    clients = Clients(emulator=gcp.address, project=PROJECT)
    instances, projects = clients.compute("InstancesClient"), clients.compute("ProjectsClient")
    _ok(gcloud(f"gcloud compute instances create fp --zone={ZONE} --machine-type=e2-standard-4 --no-address"))
    fp = _relabel_until_url_safe(instances, "fp")
    # gcloud decodes the fingerprint it read and sends it back URL-safe: with '+' or '/' stored,
    # the emulator used to answer 412 conditionNotMet. Compute itself writes byte fields URL-safe.
    _ok(gcloud(f"gcloud compute instances add-labels fp --zone={ZONE} --labels=team=ml"))
    assert not set(fp) & set("+/")
    _remeta_until_url_safe(instances, projects, "fp")
    _ok(gcloud(f"gcloud compute instances add-metadata fp --zone={ZONE} --metadata=owner=ml"))
    _ok(gcloud("gcloud compute project-info add-metadata --metadata=site=emulator"))
    got = json.loads(_ok(gcloud(f"gcloud compute instances describe fp --zone={ZONE} --format=json")))
    assert got["labels"]["team"] == "ml"
    assert {"key": "owner", "value": "ml"} in got["metadata"]["items"]
    info = json.loads(_ok(gcloud("gcloud compute project-info describe --format=json")))
    assert {"key": "site", "value": "emulator"} in info["commonInstanceMetadata"]["items"]
