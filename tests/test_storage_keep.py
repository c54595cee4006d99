"""A cluster's storage is never dropped silently (issue 50), `down` finishes and never takes a share from under
another cluster (issue 49): on the emulator, through the CLI."""

from __future__ import annotations

import json

from click.testing import CliRunner
from helpers import PROJECT, leftovers

from gcpgpu.cli import main
from gcpgpu.gcp.clients import Clients

UP = ["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
FS = f"projects/{PROJECT}/locations/us-central1-a/instances/c-fs"
LUSTRE = f"projects/{PROJECT}/locations/us-central1-a/instances/c-lustre"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, *argv])


def _mounted(gcp, node: str = "c-1") -> dict[str, str]:
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", node)
    meta = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
    return {e["path"]: e["name"] for e in json.loads(meta.get("gcpgpu-storage", "[]"))}


def _made(gcp) -> set[str]:
    c = Clients(emulator=gcp.address)
    parent = f"projects/{PROJECT}/locations/-"
    return {i.name for i in c.filestore().list_instances(parent=parent)} | {
        i.name for i in c.lustre().list_instances(parent=parent)}


def test_up_filestore_then_up_lustre_keeps_both_and_status_list_and_down_name_them(gcp):
    assert cli(*UP, "--filestore", "1TiB").exit_code == 0
    second = cli(*UP, "--lustre", "9000GiB")
    assert second.exit_code == 0, second.output
    assert "keeping filestore c-fs (1,024 GiB ZONAL, at /shared) (--no-filestore unmounts and deletes it)" in \
        second.output
    assert "filestore c-fs" in [line for line in second.output.splitlines() if "found " in line][0]  # up's found line
    assert _mounted(gcp) == {"/shared": FS, "/scratch": LUSTRE}
    third = cli(*UP, "--filestore", "1TiB")  # the Lustre is kept too, not left billed and mounted nowhere
    assert third.exit_code == 0, third.output
    assert "keeping lustre c-lustre (9,000 GiB 1000 MB/s per TiB, at /scratch)" in third.output
    assert _mounted(gcp, "c-0") == {"/shared": FS, "/scratch": LUSTRE}

    status = cli("cluster", "status", "c")
    assert status.exit_code == 0, status.output
    assert ("storage: filestore c-fs (1,024 GiB ZONAL, at /shared) in us-central1-a; cost so far unknown (no price "
            "in gcpgpu's data)") in status.output
    assert "storage: lustre c-lustre (9,000 GiB 1000 MB/s per TiB, at /scratch)" in status.output
    assert "+ filestore c-fs, lustre c-lustre: price unknown" in status.output  # COST SO FAR: never $0 for them
    data = json.loads(cli("--format", "json", "cluster", "status", "c").stdout)
    assert {(h["kind"], h["name"], h["cost_usd"]) for h in data["storage"]} == {("filestore", FS, None),
                                                                                 ("lustre", LUSTRE, None)}
    listed = json.loads(cli("--format", "json", "cluster", "list").stdout)
    assert listed[0]["storage"] == "filestore c-fs, lustre c-lustre"
    assert listed[0]["cost"].endswith("+ storage (price unknown)")

    dropped = cli(*UP, "--no-lustre")
    assert dropped.exit_code == 0, dropped.output
    assert "removing lustre c-lustre" in dropped.output and "keeping filestore c-fs" in dropped.output
    assert _mounted(gcp) == {"/shared": FS} and _made(gcp) == {FS}
    assert "addresses" not in leftovers(gcp)  # Lustre's private service access went with it

    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert "filestore c-fs" in down.output.splitlines()[-1]  # "Cluster c is gone (..., filestore c-fs deleted)."
    assert _made(gcp) == set() and leftovers(gcp) == {}


def test_an_attached_share_is_kept_on_a_rerun_and_unmount_drops_it_without_deleting_it(gcp):
    assert cli("cluster", "up", "d", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", "--yes",
               "--filestore", "1TiB").exit_code == 0
    share = f"projects/{PROJECT}/locations/us-central1-a/instances/d-fs"
    assert cli(*UP, "--mount", "filestore:d-fs:/data").exit_code == 0
    again = cli(*UP)
    assert again.exit_code == 0, again.output
    assert "keeping filestore d-fs (at /data, attached, not deleted with the cluster)" in again.output
    assert _mounted(gcp) == {"/data": share}
    gone = cli(*UP, "--unmount", "/data")
    assert gone.exit_code == 0, gone.output
    assert _mounted(gcp) == {} and share in _made(gcp)


def test_down_refuses_to_delete_a_share_another_cluster_mounts(gcp):
    assert cli(*UP, "--filestore", "1TiB").exit_code == 0
    assert cli("cluster", "up", "d", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", "--yes",
               "--mount", "filestore:c-fs:/data").exit_code == 0
    refused = cli("cluster", "down", "c", "--yes")
    assert refused.exit_code == 1, refused.output
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and "filestore c-fs is mounted by cluster d (at /data)" in lines[0], refused.output
    assert "--force-storage" in lines[0]
    assert FS in _made(gcp) and gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-0")  # nothing deleted
    also = cli(*UP, "--no-filestore")  # `up` does not take it from under d either
    assert also.exit_code == 1 and "mounted by cluster d (at /data)" in also.output, also.output
    assert FS in _made(gcp) and _mounted(gcp) == {"/shared": FS}
    forced = cli("cluster", "down", "c", "--yes", "--force-storage")
    assert forced.exit_code == 0, forced.output
    assert FS not in _made(gcp)


def test_down_goes_past_a_failing_munge_key_and_skips_it_without_slurm(gcp, monkeypatch):
    from gcpgpu.cluster import munge
    from gcpgpu.errors import CloudError

    tried: list[str] = []

    def failing(clients, project, cluster):
        tried.append(cluster)
        code = 503 if len(tried) < 3 else 403
        raise CloudError(f"deleting the munge key of cluster {cluster}: Secret Manager said {code} no")

    monkeypatch.setattr(munge, "delete_key", failing)
    assert cli(*UP, "--filestore", "1TiB").exit_code == 0
    plain = cli("cluster", "down", "c", "--yes")
    assert plain.exit_code == 0, plain.output
    assert tried == [] and _made(gcp) == set()  # a cluster without Slurm has no munge key to delete

    assert cli(*UP, "--filestore", "1TiB", "--lustre", "9000GiB").exit_code == 0
    from google.cloud import compute_v1

    instances = Clients(emulator=gcp.address).compute("InstancesClient")
    for node in ("c-0", "c-1"):  # the nodes say they run Slurm (what `up --scheduler slurm` writes)
        inst = instances.get(project=PROJECT, zone="us-central1-a", instance=node)
        items = [*inst.metadata.items, compute_v1.Items(key="gcpgpu-scheduler", value="slurm")]
        instances.set_metadata(project=PROJECT, zone="us-central1-a", instance=node, metadata_resource=compute_v1.Metadata(
            fingerprint=inst.metadata.fingerprint, items=items)).result()
    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 1, down.output
    assert len(tried) == 3  # two 503s retried, then a 403 given up on
    assert "Slurm munge key gcpgpu-munge-c: deleting the munge key of cluster c: Secret Manager said 403" in down.output
    assert _made(gcp) == set() and leftovers(gcp) == {}  # everything paid for is gone all the same


def test_down_under_503s_deletes_every_file_system_and_range(gcp):
    assert cli(*UP, "--filestore", "1TiB", "--lustre", "9000GiB").exit_code == 0
    gcp.faults.update({"error_rate": 0.6, "error_codes": [503], "seed": 3})
    down = cli("cluster", "down", "c", "--yes")
    gcp.faults.update({"error_rate": 0.0})
    assert any(r.status == 503 for r in gcp.requests.all())  # the faults fired
    assert down.exit_code == 0, down.output
    assert _made(gcp) == set() and leftovers(gcp) == {}


def test_an_up_of_lustre_under_503s_retries_them_instead_of_a_traceback(gcp):
    """Seeded: this run met a 503 from servicenetworking, which ended in googleapiclient's HttpError traceback."""
    gcp.faults.update({"error_rate": 0.6, "error_codes": [503], "seed": 4})
    up = cli(*UP, "--lustre", "9000GiB")
    gcp.faults.update({"error_rate": 0.0})
    assert up.exit_code == 0, up.output
    assert any(r.status == 503 and r.api == "servicenetworking" for r in gcp.requests.all())
    assert _mounted(gcp) == {"/scratch": LUSTRE}
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
    assert leftovers(gcp) == {}


class _Request:
    """A googleapiclient request answering `codes` in turn (200: a result)."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)

    def execute(self) -> dict:
        import httplib2
        from googleapiclient.errors import HttpError

        code = self.codes.pop(0)
        if code == 200:
            return {"done": True}
        raise HttpError(httplib2.Response({"status": code, "reason": "Unavailable" if code == 503 else "Forbidden"}),
                        b'{"error": {"message": "no"}}')


def test_a_servicenetworking_failure_is_one_cloud_error_line_after_transient_retries():
    import pytest

    from gcpgpu.errors import CloudError
    from gcpgpu.storage.access import _run

    assert _run(_Request(503, 503, 200), "connecting") == {"done": True}
    assert _run(_Request(404), "disconnecting", gone_ok=True) == {}
    with pytest.raises(CloudError, match="^connecting: servicenetworking said 403"):
        _run(_Request(503, 403), "connecting")


def test_status_list_and_down_name_the_scheduler_and_a_left_state_disk(gcp):
    """A Slurm cluster's state disk outlives its nodes (a `down` stopped after them): status and list still name
    it and the scheduler it serves, and `down` deletes and names it."""
    from google.cloud import compute_v1

    disks = Clients(emulator=gcp.address).compute("DisksClient")
    disks.insert(project=PROJECT, zone="us-central1-a", disk_resource=compute_v1.Disk(
        name="c-slurm-state", size_gb=10, type_=f"projects/{PROJECT}/zones/us-central1-a/diskTypes/pd-ssd",
        labels={"gcpgpu-cluster": "c", "gcpgpu-managed": "true"})).result()
    status = cli("cluster", "status", "c")
    assert status.exit_code == 0, status.output  # was: "no cluster named c"
    assert "scheduler: slurm" in status.output
    assert "storage: Slurm state disk c-slurm-state (10 GiB pd-ssd) in us-central1-a; cost so far unknown" in \
        status.output
    row = json.loads(cli("--format", "json", "cluster", "list").stdout)[0]
    assert (row["cluster"], row["scheduler"], row["storage"]) == ("c", "slurm", "Slurm state disk c-slurm-state")
    assert row["status"].startswith("incomplete (0 nodes, scheduler slurm, Slurm state disk c-slurm-state)")
    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert "Slurm state disk c-slurm-state deleted" in down.output.splitlines()[-1]
    assert leftovers(gcp) == {}
