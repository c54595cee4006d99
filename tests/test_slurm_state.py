"""A Slurm cluster on real nodes: the queue on a disk that outlives node 0, and the startup script that runs Slurm.

`cluster up --scheduler slurm` makes CLUSTER-slurm-state and attaches it to node 0 (again to a node 0 made anew
under its name); `down` and a failed `up` delete it (gcpgpu/cluster/slurm_state.py). The startup script mounts
it on node 0 and runs gcpgpu.slurm.node from gcpgpu's image (templates/startup.sh.j2). The queue surviving node 0
on the emulator's real Slurm: tests/test_cluster_slurm.py.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients, leftovers, make_plan, wait_for
from test_node_scripts import lint

from gcpgpu.cli import main
from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.session import Reporter

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
SPEC = ["--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--scheduler", "slurm"]
ZONE = "us-central1-a"


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def startup(machine_type: str, zone: str, scheduler: str | None = "slurm") -> str:
    p = make_plan(name="s", machine_type=machine_type, zones=[zone], scheduler=scheduler)
    return next(i["value"] for i in p.instance_properties["metadata"]["items"] if i["key"] == "startup-script")


def state_disks(inst: dict) -> list[dict]:
    return [d for d in inst.get("disks", []) if d.get("deviceName") == "gcpgpu-slurm-state"]


class AtStep(Reporter):
    """Runs `fn` when `up` says a step whose text starts with `text`."""

    def __init__(self, text: str, fn) -> None:
        self.text, self.fn = text, fn

    def step(self, key: str, text: str) -> None:
        if text.startswith(self.text):
            self.fn()


# -- the plan -----------------------------------------------------------------------------------------------
def test_the_plan_and_a_dry_run_show_the_state_disk_and_make_nothing(gcp):
    shown = cli("cluster", "plan", "q", *SPEC)
    assert shown.exit_code == 0, shown.output
    assert "q-slurm-state" in shown.output and "10 GB pd-balanced, Slurm's queue" in shown.output
    as_json = json.loads((out := cli("cluster", "plan", "q", *SPEC, fmt="json").output)[out.index("{"):])
    assert [d["name"] for d in as_json["disks"]] == ["q-slurm-state"]
    dry = cli("cluster", "up", "q", *SPEC, "--dry-run")
    assert dry.exit_code == 0 and "q-slurm-state" in dry.output, dry.output
    plain = cli("cluster", "plan", "q", *SPEC[:-2], fmt="json").output
    assert "disks" not in json.loads(plain[plain.index("{"):]) and "slurm-state" not in plain
    assert leftovers(gcp) == {}


def test_every_node_names_the_state_disk_and_the_image_it_runs_slurm_from():
    p = make_plan(name="q", machine_type="a4-highgpu-8g", zones=["us-east5-a"], scheduler="slurm",
                  agent_image="us-east5-docker.pkg.dev/p/gcpgpu/gcpgpu-trainer:rdma-1")
    items = {i["key"]: i["value"] for i in p.instance_properties["metadata"]["items"]}
    assert items["gcpgpu-slurm-state"] == "q-slurm-state"
    assert items["gcpgpu-slurm-image"] == "us-east5-docker.pkg.dev/p/gcpgpu/gcpgpu-trainer:rdma-1"
    # A4 boots only from Hyperdisk Balanced: the state disk takes the boot disk's type, which the family takes.
    assert [r["details"].split(",")[0] for r in p.resources() if r["kind"] == "disk"] == ["10 GB hyperdisk-balanced"]


# -- the disk's life with the cluster ------------------------------------------------------------------------
def test_up_attaches_the_state_disk_to_node_0_again_after_node_0_is_made_anew_and_down_deletes_it(gcp):
    c = Cluster(clients(gcp), PROJECT)
    plan = make_plan(name="q", machine_type="a2-highgpu-1g", zones=[ZONE], scheduler="slurm")
    c.up(plan)
    disk = gcp.compute.get(PROJECT, f"zones/{ZONE}/disks", "q-slurm-state")
    assert disk["labels"]["gcpgpu-cluster"] == "q" and disk["sizeGb"] == "10" and disk["type"].endswith("/pd-balanced")
    node0 = gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", "q-0")
    [attached] = state_disks(node0)
    assert attached["mode"] == "READ_WRITE" and attached["autoDelete"] is False
    assert state_disks(gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", "q-1")) == []
    # Node 0 goes (a host error, a deletion) and comes back under its name: it gets the same disk, the queue's.
    gcp.compute.delete(PROJECT, f"zones/{ZONE}/instances", "q-0")
    wait_for(lambda: "q-0" not in leftovers(gcp).get("instances", []), timeout=60, what="q-0 deleted")
    c.up(make_plan(name="q", machine_type="a2-highgpu-1g", zones=[ZONE], scheduler="slurm"))
    again = gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", "q-0")
    assert again["id"] != node0["id"] and [d["source"] for d in state_disks(again)] == [disk["selfLink"]]
    assert gcp.compute.get(PROJECT, f"zones/{ZONE}/disks", "q-slurm-state")["id"] == disk["id"]
    c.down("q")
    assert leftovers(gcp) == {}


def test_a_failed_up_takes_back_the_state_disk_it_made(gcp):
    def boom() -> None:
        raise RuntimeError("attach refused")

    plan = make_plan(name="q", machine_type="a2-highgpu-1g", zones=[ZONE], scheduler="slurm")
    with pytest.raises(RuntimeError, match="attach refused"):
        Cluster(clients(gcp), PROJECT, AtStep("Attaching disk q-slurm-state", boom)).up(plan)
    assert leftovers(gcp) == {}


def test_down_deletes_a_state_disk_an_interrupted_up_left(gcp):
    def interrupt() -> None:
        raise KeyboardInterrupt

    plan = make_plan(name="q", machine_type="a2-highgpu-1g", zones=[ZONE], scheduler="slurm")
    with pytest.raises(KeyboardInterrupt):
        Cluster(clients(gcp), PROJECT, AtStep("Attaching disk q-slurm-state", interrupt)).up(plan)
    assert "q-slurm-state" in leftovers(gcp)["disks"]
    down = cli("cluster", "down", "q", "--yes")
    assert down.exit_code == 0, down.output
    assert "Deleting Slurm state disk q-slurm-state" in down.output and leftovers(gcp) == {}


# -- the startup script ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("machine_type", "zone"), [("a2-highgpu-8g", "us-central1-a"), ("a4-highgpu-8g", "us-east5-a")])
def test_a_slurm_nodes_startup_script_passes_shellcheck_and_runs_slurm_from_gcpgpus_image(tmp_path, machine_type, zone):
    text = startup(machine_type, zone)
    lint(tmp_path, text)
    # Node 0 mounts the state disk at slurmctld's state folder first, formatting it only when blkid finds nothing.
    assert "STATE_DEV=/dev/disk/by-id/google-gcpgpu-slurm-state" in text
    assert 'if [ "$found" = 2 ]; then\n      mkfs.ext4' in text and 'mount -o defaults "$STATE_DEV" "$SLURM_DIR/state"' in text
    # The daemons run from the image metadata names, as the follower does, with what node.py expects.
    assert '"$MD/instance/attributes/gcpgpu-slurm-image"' in text
    assert "docker run --rm --name gcpgpu-slurm --network host --pid host --privileged" in text
    assert '--volume "$dir:$dir" --volume /run/gcpgpu-slurm:/run/gcpgpu-slurm' in text
    assert '-m gcpgpu.slurm.node --project "$project" --cluster "$GCPGPU_CLUSTER" --node "$name"' in text
    # Started by the script each boot after the mount, never enabled to start before it.
    assert "systemctl restart gcpgpu-slurm.service" in text and "enable --now gcpgpu-slurm" not in text


def test_a_node_without_slurm_gets_none_of_it():
    text = startup("a2-highgpu-8g", "us-central1-a", scheduler=None)
    assert "gcpgpu-slurm" not in text and "slurm-state" not in text
