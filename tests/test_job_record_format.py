"""One JobRecord for what gcpgpu stores of a cluster job (jobs/cluster/record.py): the node record, the project
record, a recovery's pending attempt and a Slurm job's queue fields, read the same by the laptop, the nodes'
followers and a Slurm controller's queue agent.

A node may run an older image than the laptop, so the stored keys stay the ones gcpgpu has always written:
the records below are what gcpgpu at 271fb35 wrote (captured from its emulator runs: a detached job on a
2-node Spot cluster, a Slurm job queued at high priority, and a recovery written down in the journal, as
its recover.py wrote it). Each is read by today's gcpgpu, by every view, and written back unchanged.
"""

from __future__ import annotations

import copy
import json

from click.testing import CliRunner
from helpers import PROJECT

from gcpgpu.cli import main
from gcpgpu.jobs.cluster.record import AGENT, JobRecord, QueuePlace

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
NCCL = {"GCPGPU_MACHINE_TYPE": "a2-highgpu-1g", "NCCL_IB_DISABLE": "1", "NCCL_NSOCKS_PERTHREAD": "4",
        "NCCL_P2P_LEVEL": "NVL", "NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_SOCKET_NTHREADS": "4"}
# gcpgpu-job on node c-0 (271fb35: jobs/cluster.py's job_record and deliver)
NODE_271 = {
    "agent_image": "us-central1-docker.pkg.dev/test-proj/gcpgpu/gcpgpu-trainer:none-emulator", "args": [],
    "attempt": 0, "bundled_trainer": False, "cluster": "c", "command": [], "created": "2026-12-07T15:29:30Z",
    "detached": True, "env": NCCL, "follow": {}, "gcs_buckets": [], "gpus_per_node": 1, "history": [],
    "id": "train-c7bdd2", "image": "busybox", "machine_type": "a2-highgpu-1g", "master_addr": "10.128.0.3",
    "master_port": 29500, "mounts": [], "name": "train", "nnodes": 2, "node_dirs": [], "output_dir": None,
    "policy": {"max_restarts_on_errors": 1, "notify": ["https://hooks.example.com/x"], "retry_on_exit_codes": [],
               "stall_timeout": None},
    "recover": 2, "run": "train-c7bdd2", "rxdm": None, "submitted": "2026-12-07T15:29:30Z", "timeout": None,
    "user_mounts": []}
# its entry of gcpgpu-jobs-c in project metadata (271fb35: jobs/record.py's from_nodes, then advance)
PROJECT_271 = {
    "at": "2026-12-07T15:31:02Z", "attempt": 1, "created": "2026-12-07T15:29:30Z", "detached": True,
    "history": [{"attempt": 1, "at": "2026-12-07T15:31:02Z", "lost": ["c-1"], "zone": "us-central1-a",
                 "cause": "preempted", "last_step": None, "pull_s": 0.0, "log_every": 1,
                 "delivered": "2026-12-07T15:31:20Z"}],
    "id": "train-c7bdd2", "image": "busybox", "machine_type": "a2-highgpu-1g", "name": "train", "nnodes": 2,
    "node": "c-1", "cause": "preempted", "error": None, "output_dir": None,
    "policy": {"max_restarts_on_errors": 1, "retry_on_exit_codes": [], "stall_timeout": None},
    "recover": 2, "started": "2026-12-07T15:29:41Z", "state": "RECOVERING"}
# gcpgpu-jobs-q: a Slurm job before the controller's agent took it (271fb35: jobs/queue.py's submit)
SLURM_271 = {
    "at": "2026-12-07T15:29:51Z", "attempt": 0, "created": "2026-12-07T15:29:51Z", "detached": False,
    "history": [], "id": "train-659cc7", "image": "busybox", "machine_type": "a2-highgpu-1g", "name": "train",
    "nnodes": 1, "output_dir": None, "policy": {}, "queue": {"nodes": 1, "position": 1, "priority": "high"},
    "reason": "waiting for the controller's agent", "recover": None, "state": "PENDING",
    "submit": {"args": [], "attempt": 0, "bundled_trainer": False, "cluster": "q", "command": [],
               "created": "2026-12-07T15:29:51Z", "detached": False, "env": NCCL, "follow": {}, "gcs_buckets": [],
               "gpus_per_node": 1, "history": [], "id": "train-659cc7", "image": "busybox",
               "machine_type": "a2-highgpu-1g", "master_port": 29500, "mounts": [], "name": "train", "nnodes": 1,
               "node_dirs": [], "output_dir": None, "policy": {}, "recover": None, "run": "train-659cc7",
               "submitted": "2026-12-07T15:29:51Z", "timeout": None, "user_mounts": []}}
# ... and once Slurm ran it (271fb35: gcpgpu/slurm/queue.py's _sbatch and _merged): `submit` gone
SLURM_RUNNING_271 = {**{k: v for k, v in SLURM_271.items() if k != "submit"}, "slurm_id": "7", "state": "RUNNING",
                     "reason": None, "slurm_nodes": "q-0", "started": "2026-12-07T15:29:53Z",
                     "queue": {"nodes": 1, "position": None, "priority": "high"}}
# gcpgpu-recovery-c: a recovery written down (271fb35: jobs/recover.py's _resubmit)
PENDING_271 = {**NODE_271, "attempt": 1, "run": "train-c7bdd2-r1", "args": [],
               "env": {**NCCL, "GCPGPU_RESUME": "1", "GCPGPU_RESTART": "1"}, "history": PROJECT_271["history"][:1],
               "recovering": {"zone": "us-central1-a", "lost": ["c-1"], "lost_ids": ["1006"],
                              "spec": "{\"name\": \"c\"}"}}


def without_none(value: dict) -> dict:
    return {k: v for k, v in value.items() if v is not None}


def test_every_record_gcpgpu_wrote_at_271fb35_reads_as_one_record_and_writes_back_its_keys():
    node = JobRecord.from_json(copy.deepcopy(NODE_271))
    assert (node.id, node.run_key, node.scheduler, node.nnodes, node.recover, node.detached) == \
        ("train-c7bdd2", "train-c7bdd2", AGENT, 2, 2, True)
    assert node.policy["notify"] == ["https://hooks.example.com/x"] and node.master_addr == "10.128.0.3"
    led = JobRecord.from_json(copy.deepcopy(PROJECT_271))
    assert (led.state, led.attempt, led.node, led.cause) == ("RECOVERING", 1, "c-1", "preempted")
    assert led.history[0]["delivered"] == "2026-12-07T15:31:20Z" and not led.final
    queued = JobRecord.from_json(copy.deepcopy(SLURM_271))
    assert queued.scheduler == "slurm" and queued.queue == QueuePlace("high", 1, 1)  # no `scheduler` key then
    assert queued.submit is not None and queued.submit.image == "busybox" and queued.submit.run_key == queued.id
    running = JobRecord.from_json(copy.deepcopy(SLURM_RUNNING_271))
    assert (running.scheduler, running.slurm_id, running.slurm_nodes, running.submit) == ("slurm", "7", "q-0", None)
    pending = JobRecord.from_json(copy.deepcopy(PENDING_271))
    assert pending.attempt == 1 and pending.recovering["lost_ids"] == ["1006"] and pending.env["GCPGPU_RESTART"] == "1"
    # Written back, a record keeps every key it was read with and its value (None is not written: every reader
    # .get()s it); a Slurm record says the scheduler it was read as.
    for old, record in ((NODE_271, node), (PROJECT_271, led), (PENDING_271, pending)):
        assert record.to_json() == without_none(old)
    assert "scheduler" not in node.to_json()
    assert running.to_json() == {**without_none(SLURM_RUNNING_271), "queue": {"nodes": 1, "priority": "high"},
                                 "scheduler": "slurm"}
    assert queued.to_json() == {**without_none(SLURM_271), "submit": without_none(SLURM_271["submit"]),
                                "scheduler": "slurm"}


def test_a_key_a_newer_gcpgpu_wrote_is_kept_and_a_record_without_an_id_is_none():
    newer = JobRecord.from_json({**NODE_271, "priority_class": "team-a", "submit": {"id": "x", "gang": True}})
    assert newer.extra == {"priority_class": "team-a"} and newer.submit.extra == {"gang": True}
    assert newer.to_json()["priority_class"] == "team-a" and newer.to_json()["submit"]["gang"] is True
    assert newer.but(state="RUNNING").to_json()["priority_class"] == "team-a"
    assert JobRecord.from_json({"name": "no id"}) is None and JobRecord.from_json("[1]") is None
    # A number where the format has one, whatever a writer made of it.
    assert JobRecord.from_json({"id": "j", "nnodes": "2", "attempt": "3", "slurm_id": 12}).nnodes == 2
    assert JobRecord.from_json({"id": "j", "attempt": "3", "slurm_id": 12}).slurm_id == "12"


def test_todays_records_round_trip_through_their_json():
    record = JobRecord(id="train-abc123", name="train", cluster="c", scheduler="slurm", image="busybox",
                       args=["--model", "tiny"], env={"A": "1"}, nnodes=2, attempt=1, run="train-abc123-r1",
                       history=[{"attempt": 1, "at": "2026-12-07T10:00:00Z", "lost": ["c-1"], "cause": "preempted"}],
                       recover=3, policy={"max_restarts_on_errors": 1}, state="PENDING",
                       queue=QueuePlace("low", 2, 4), submit=JobRecord(id="train-abc123", image="busybox"))
    stored = json.dumps(record.to_json(), sort_keys=True)
    assert JobRecord.from_json(json.loads(stored)) == record
    assert json.loads(stored)["scheduler"] == "slurm"


def put_project_records(gcp, cluster: str, records: list[dict]) -> None:
    """Write gcpgpu-jobs-CLUSTER into the emulator's project metadata as an older gcpgpu left it."""
    from google.cloud import compute_v1
    from helpers import clients

    projects = clients(gcp).compute("ProjectsClient")
    md = projects.get(project=PROJECT).common_instance_metadata
    items = [compute_v1.Items(key=i.key, value=i.value) for i in md.items if i.key != f"gcpgpu-jobs-{cluster}"]
    items.append(compute_v1.Items(key=f"gcpgpu-jobs-{cluster}", value=json.dumps({"jobs": records})))
    projects.set_common_instance_metadata(project=PROJECT, metadata_resource=compute_v1.Metadata(
        fingerprint=md.fingerprint, items=items)).result()


def test_jobs_an_older_gcpgpu_recorded_are_shown_by_status_and_list(gcp):
    """No node holds these jobs any more (their records alone tell them): `job status` and `job list` read the
    271fb35 records, a Slurm job's through the Slurm backend, its queue columns included."""
    ended = {**PROJECT_271, "state": "SUCCEEDED", "ended": "2026-12-07T15:40:00Z", "node": None, "cause": None}
    put_project_records(gcp, "c", [ended])
    put_project_records(gcp, "q", [SLURM_RUNNING_271])
    runner = CliRunner()
    got = runner.invoke(main, [*GLOBAL, "--format", "json", "job", "status", "cluster:c:train-c7bdd2"])
    assert got.exit_code == 0, got.output
    status = json.loads(got.stdout)
    assert (status["state"], status["attempt"], status["recoveries"]) == ("SUCCEEDED", 1, 1)
    assert status["history"][0]["lost"] == ["c-1"] and status["nnodes"] == 2
    got = runner.invoke(main, [*GLOBAL, "--format", "json", "job", "status", "cluster:q:train-659cc7"])
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["state"] == "RUNNING"
    listed = runner.invoke(main, [*GLOBAL, "--format", "json", "job", "list", "--clusters"])
    assert listed.exit_code == 0, listed.output
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows["cluster:c:train-c7bdd2"]["state"] == "SUCCEEDED"
    slurm = rows["cluster:q:train-659cc7"]
    assert (slurm["state"], slurm["priority"], slurm["slurm_nodes"], slurm["via"]) == ("RUNNING", "high", "q-0",
                                                                                      "gcpgpu")
