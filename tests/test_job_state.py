"""jobs/state.py: a job's state is one typed value whose JSON is what `job status --format json` always
printed, and the one place that says which states are final. A checked job is never changed after."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gcpgpu import catalog
from gcpgpu.jobs.cluster.placement import Placement
from gcpgpu.jobs.spec import JobSpec, validate
from gcpgpu.jobs.state import CAUSE_FOLLOWER, CAUSE_LOG, FINAL, JobState, is_final

POOL = {"pool": "workerpool0", "replicas": 1, "machine_type": "a3-highgpu-8g", "accelerators": "8 x NVIDIA_H100_80GB",
        "image": "busybox"}
NODE = {"node": "c-0", "rank": 0, "state": "FAILED", "exit_code": 3, "started": "2026-01-01T00:00:05Z",
        "ended": "2026-01-01T00:01:00Z", "message": "boom", "node_status": "RUNNING", "zone": "us-central1-a",
        "ends_at": None, "maintenance": {}}
HISTORY = [{"attempt": 1, "at": "2026-01-01T00:00:30Z", "lost": ["c-1"], "zone": "us-central1-a", "cause": "preempted",
            "last_step": 9, "log_every": 1, "resumed_at": 5, "steps_redone": 5, "steps_redone_max": 5,
            "kind": "recovery", "node": "c-1", "redone": 5}]
# The dicts `job status --format json` printed before the state was typed, key for key and in their order (with
# `submitter`, who submitted it, added since: "unknown" for a job from before gcpgpu kept it).
VERTEX = {"id": "vertex:us-central1:123", "target": "vertex", "name": "train", "state": "FAILED",
          "created": "2026-01-01T00:00:00Z", "started": "2026-01-01T00:00:05Z", "ended": "2026-01-01T00:01:00Z",
          "error": "exited with a non-zero status", "nodes": 1, "machine_type": "a3-highgpu-8g",
          "submitter": "alice@example.com", "strategy": None,
          "pools": [POOL], "resource": "projects/p/locations/us-central1/customJobs/123", "note": None,
          "cause": "ValueError: bad"}
CLUSTER_HEAD = {"id": "cluster:c:train-abc123", "target": "cluster", "name": "train", "state": "FAILED",
                "created": "2026-01-01T00:00:00Z", "started": "2026-01-01T00:00:05Z", "ended": "2026-01-01T00:01:00Z",
                "error": "node c-0 (rank 0) exited with status 3: boom", "nodes": 1, "machine_type": "a2-highgpu-1g",
                "submitter": "unknown", "cluster": "c", "master": "10.0.0.2:29500", "image": "busybox", "per_node": [NODE], "nnodes": 1,
                "attempt": 1, "recover": None, "recoveries": 1, "history": HISTORY, "restarts": 0,
                "output_dir": "gs://bkt/run"}
SPENT = {"uptime_s": 60, "node_hours": 0.017, "cost_usd": 0.06, "uptime": "1m", "cost": "$0.06"}
REDONE = {"steps_redone": 5, "steps_redone_max": 5}
SHOWN = [
    pytest.param(VERTEX, id="vertex-with-its-log-cause"),
    pytest.param({**CLUSTER_HEAD}, id="cluster-as-followed"),
    pytest.param({**CLUSTER_HEAD, "cause": None}, id="cluster-followed-with-an-unread-cause"),
    pytest.param({**CLUSTER_HEAD, "cause": "stalled"}, id="cluster-with-the-follower-s-verdict"),
    pytest.param({**CLUSTER_HEAD, **SPENT, **REDONE, "cause": "ValueError: bad"}, id="cluster-status-with-log-cause"),
    pytest.param({**CLUSTER_HEAD, "cause": "stalled", **SPENT, **REDONE}, id="cluster-status-with-verdict"),
    pytest.param({**CLUSTER_HEAD, **SPENT}, id="cluster-status-never-recovered"),
]


@pytest.mark.parametrize("shown", SHOWN)
def test_the_json_round_trips_byte_for_byte(shown):
    state = JobState.from_dict(json.loads(json.dumps(shown)))
    assert json.dumps(state.to_dict(), indent=2) == json.dumps(shown, indent=2)
    assert state.state == shown["state"] and state["id"] == shown["id"]  # attributes, and the JSON's names


def test_where_a_cause_came_from_decides_where_the_json_shows_it():
    base = JobState.from_dict({**CLUSTER_HEAD, **SPENT})
    verdict = dataclasses.replace(base, cause="stalled", cause_from=CAUSE_FOLLOWER)
    read = dataclasses.replace(base, cause="ValueError: bad", cause_from=CAUSE_LOG)
    assert list(verdict.to_dict()).index("cause") == list(verdict.to_dict()).index("output_dir") + 1
    assert list(read.to_dict())[-1] == "cause"
    assert "cause" not in base.to_dict()


def test_a_cluster_job_known_only_from_its_recovery_has_no_master_or_retries():
    """Every node replaced mid-recovery: the journal alone knows the job (follower.job_status)."""
    state = JobState(id="cluster:c:j", target="cluster", state="RECOVERING", cluster="c", nnodes=2)
    shown = state.to_dict()
    assert "master" not in shown and "restarts" not in shown and shown["per_node"] == [] and shown["nnodes"] == 2


def test_final_states_are_decided_in_one_place():
    assert FINAL == {"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED", "PARTIALLY_SUCCEEDED"}
    assert [s for s in ("QUEUED", "PENDING", "RUNNING", "CANCELLING", "RECOVERING", "UNKNOWN") if is_final(s)] == []
    assert JobState(state="CANCELLED").final and not JobState(state="RECOVERING").final


def test_a_checked_job_is_not_changed_by_what_submit_decides_later():
    job = validate(JobSpec(target="cluster", cluster="c", args=["--model", "tiny"]), project="p",
                   region="us-central1", zone=None)
    assert job.image_pending
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.image = "busybox"  # type: ignore[misc]
    placed = Placement(nodes=[], machine=catalog.get_machine_type("a2-highgpu-8g"),
                       args=["--model", "tiny", "--batch-size", "64"], notes=["trainer --batch-size 64"])
    ready = placed.apply(job)
    assert job.args == ["--model", "tiny"] and job.notes == []  # the checked job, as it was
    assert ready.args == ["--model", "tiny", "--batch-size", "64"] and ready.notes == ["trainer --batch-size 64"]
    assert placed.apply(ready) == ready  # applying the placement again adds nothing
