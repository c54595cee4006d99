"""`cluster up --scheduler slurm`: the emulator runs the system's Slurm for the cluster's nodes.

Tests that start Slurm's daemons skip, saying what to install, where slurmctld is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import PROJECT, alive, emulator_threads, leftovers, make_plan, wait_for

from gcpgpu.cli import main
from gcpgpu.fakes.guest.slurm import slurm_installed
from gcpgpu.fakes.host.shared_mounts import disk_folder_parts

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["cluster", "up", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
needs_slurm = pytest.mark.skipif(slurm_installed() is not None, reason=str(slurm_installed()))


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


def secrets(gcp) -> list[str]:
    return [s["name"].rsplit("/", 1)[-1] for s in gcp.secretmanager.list_secrets(PROJECT).get("secrets", [])]


def sinfo(gcp, cluster: str, node: str = "0") -> dict[str, str]:
    """Node -> state as Slurm's own sinfo reports it, through node `node`'s slurm.conf."""
    folder = gcp.jobs.slurm.folder(PROJECT, cluster)
    if folder is None:
        return {}
    env = {**os.environ, "SLURM_CONF": str(folder / "nodes" / f"{cluster}-{node}" / "slurm.conf")}
    done = subprocess.run(["sinfo", "-h", "-N", "-p", "normal", "-o", "%N %t"], capture_output=True, text=True,
                          env=env, timeout=30, check=False)
    return dict(line.split() for line in done.stdout.splitlines() if line.strip())


def slurm_pids(*folders: Path) -> dict[int, str]:
    """Pid -> command line of every process on this machine that names one of the cluster's Slurm folders
    (slurmctld and slurmd name its folder, munged its run folder)."""
    marks = [str(f) for f in folders]
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                line = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(m in line for m in marks):
                out[int(entry)] = line
    return out


@pytest.mark.parametrize("value", ["pbs", "Slurm", "kueue"])
def test_a_scheduler_other_than_slurm_is_refused_in_one_line_and_nothing_is_made(gcp, value):
    result = cli(*UP[:2], "bad", *UP[2:], "--scheduler", value)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "--scheduler" in result.output and "slurm" in result.output
    assert leftovers(gcp) == {} and secrets(gcp) == []


def test_a_spec_files_unknown_scheduler_is_refused_too(gcp, tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("name: filed\nmachine_type: a2-highgpu-1g\nzones: [us-central1-a]\nscheduler: pbs\n")
    result = cli("cluster", "up", "-f", str(spec), "--yes")
    assert result.exit_code == 2 and "slurm" in result.output and len(result.output.strip().splitlines()) == 1
    assert leftovers(gcp) == {}


def test_the_plan_names_the_munge_secret_in_metadata_never_a_key(gcp):
    plan = make_plan(name="planned", scheduler="slurm")
    items = {i["key"]: i["value"] for i in plan.instance_properties["metadata"]["items"]}
    assert items["gcpgpu-scheduler"] == "slurm"
    assert items["gcpgpu-slurm-munge"] == f"projects/{PROJECT}/secrets/gcpgpu-munge-planned"
    plain = {i["key"] for i in make_plan(name="plain").instance_properties["metadata"]["items"]}
    assert not {"gcpgpu-scheduler", "gcpgpu-slurm-munge"} & plain


@needs_slurm
def test_a_slurm_clusters_nodes_run_slurm_a_lost_vm_takes_its_slurmd_and_down_leaves_nothing(gcp):
    result = cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm")
    assert result.exit_code == 0, result.output
    assert secrets(gcp) == ["gcpgpu-munge-q"]
    key = gcp.secretmanager.access_version(PROJECT, "gcpgpu-munge-q", "latest")["payload"]["data"]
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "q-0")
    assert key not in json.dumps(inst)  # the metadata names the secret only
    # Slurm's own view: both nodes registered with the controller on node 0, idle.
    assert wait_for(lambda: sinfo(gcp, "q") == {"q-0": "idle", "q-1": "idle"} or None, timeout=60,
                    what="both nodes idle in sinfo")
    folder = gcp.jobs.slurm.folder(PROJECT, "q")
    run = gcp.jobs.slurm.run_folder(PROJECT, "q")
    assert set(gcp.jobs.slurm.running()) == {"q-0", "q-1"}
    # A VM that goes takes its daemons with it. Node 0's keeper may make a new q-1 at once (a lost node is
    # replaced), whose daemons start under the same name: so this waits for the lost VM's own run and processes.
    lost = gcp.jobs.slurm.running()["q-1"]
    pids = [pid for pid, line in slurm_pids(folder, run).items() if "q-1" in line]
    assert pids
    gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", "q-1")
    wait_for(lambda: lost not in gcp.jobs.slurm.running().values(), timeout=120, what="the lost q-1's daemons gone",
             explain=lambda: watcher_state(gcp))
    wait_for(lambda: not [p for p in pids if alive(p)], timeout=120, what="no process of the lost q-1 left")
    assert [c for c in slurm_pids(folder, run).values() if "slurmctld" in c]  # node 0's controller goes on
    assert cli("cluster", "down", "q", "--yes").exit_code == 0
    wait_for(lambda: not slurm_pids(folder, run), timeout=120, what="no Slurm process of the cluster left")
    assert secrets(gcp) == [] and leftovers(gcp) == {}
    wait_for(lambda: not folder.exists() and not run.exists(), timeout=10, what="the cluster's Slurm folders gone")


def watcher_state(gcp) -> str:
    """What the emulator's Slurm watcher holds and sees, and where its thread is: said when a wait on it fails."""
    slurm = gcp.jobs.slurm
    runs = {iid: (name, getattr(gcp.jobs.runner.get(run_id), "state", None), run_id)
            for iid, (run_id, _p, name) in dict(slurm.runs).items()}
    vms = {i["name"]: i["status"] for i in gcp.compute.instance_summaries(PROJECT)}
    return f"runs {runs}\nVMs {vms}\n{emulator_threads('emulator-slurm')}"


QUICK = ["--model", "tiny", "--steps", "3", "--seq-len", "16", "--batch-size", "2"]
LONG = ["--model", "tiny", "--steps", "100000", "--seq-len", "16", "--batch-size", "2"]


def job_rows(gcp) -> dict[str, dict]:
    listed = cli("--format", "json", "job", "list", "--cluster", "q")
    assert listed.exit_code == 0, listed.output
    return {r["name"]: r for r in json.loads(listed.output)}


def slurm_id(gcp, job: str) -> str | None:
    from helpers import clients

    from gcpgpu.jobs.cluster import store as records

    found = records.read(clients(gcp), PROJECT, "q").of(job.rsplit(":", 1)[-1])
    return found.slurm_id if found is not None else None


@needs_slurm
def test_the_queue_outlives_node_0_on_its_state_disk_and_down_leaves_no_disk_and_no_slurm_process(gcp):
    """Node 0 (slurmctld) is lost with one job running and one queued; `up` makes it again under its name and
    attaches the cluster's Slurm state disk, whose folder is where the emulator's node 0 keeps slurmctld's state:
    the queued job is still there and runs to SUCCEEDED. Each step waits for the event that says it happened."""
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0

    def submit(*argv: str) -> str:
        done = cli("--format", "json", "job", "submit", "--cluster", "q", *argv)
        assert done.exit_code == 0, done.output
        return json.loads(done.output[done.output.index("{"):])["id"]

    running = submit("--name", "running", "--nodes", "1", "--", *LONG)
    queued = submit("--name", "queued", "--nodes", "2", "--", *QUICK)  # waits for the running job's node
    wait_for(lambda: (rows := job_rows(gcp)).get("running", {}).get("state") == "RUNNING"
             and rows.get("queued", {}).get("state") == "PENDING" and slurm_id(gcp, queued),
             timeout=300, interval=0.5, what="one job running, one queued in Slurm")
    folder, run = gcp.jobs.slurm.folder(PROJECT, "q"), gcp.jobs.slurm.run_folder(PROJECT, "q")
    # slurmctld has saved the queued job on the state disk (a few seconds after a change: Slurm's own pace).
    disk = gcp.compute.get(PROJECT, "zones/us-central1-a/disks", "q-slurm-state")
    state = gcp.jobs.agent.storage.root.joinpath(*disk_folder_parts(PROJECT, "us-central1-a", disk["name"], disk["id"]))
    wait_for(lambda: (state / "job_state").exists() and queued.rsplit(":", 1)[-1].encode()
             in (state / "job_state").read_bytes(), timeout=120, interval=0.5, what="the queued job on the state disk")
    # Node 0 goes, its boot disk with it, and takes slurmctld along.
    gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", "q-0")
    wait_for(lambda: "q-0" not in leftovers(gcp).get("instances", []), timeout=120, what="q-0 deleted")
    wait_for(lambda: not [c for c in slurm_pids(folder, run).values() if "slurmctld" in c], timeout=120,
             what="slurmctld gone with node 0")
    # Its replacement under its name gets the state disk, and the queue back.
    again = cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm")
    assert again.exit_code == 0, again.output
    wait_for(lambda: [c for c in slurm_pids(folder, run).values() if "slurmctld" in c], timeout=120,
             what="slurmctld on the new node 0")
    assert job_rows(gcp)["queued"]["state"] == "PENDING" and slurm_id(gcp, queued)  # the same Slurm job, kept
    cli("job", "cancel", running)  # pending, running or ended by the loss: either way its node is free
    wait_for(lambda: job_rows(gcp)["queued"]["state"] == "SUCCEEDED", timeout=600, interval=0.5,
             what="the queued job run to SUCCEEDED after node 0's replacement")
    assert cli("job", "status", queued).exit_code == 0
    assert cli("cluster", "down", "q", "--yes").exit_code == 0
    wait_for(lambda: not slurm_pids(folder, run), timeout=120, what="no Slurm process of the cluster left")
    assert leftovers(gcp) == {} and secrets(gcp) == []  # the state disk went with the cluster
