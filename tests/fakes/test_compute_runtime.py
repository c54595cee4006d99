"""scheduling.maxRunDuration in the emulator: Compute Engine itself ends a VM when its run time is up,
on the emulator's clock, as compute_v1 readers see it. Short limits in tests: advance the clock."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1
from helpers import wait_for

from gcpgpu.fakes.core import parse_rfc3339
from gcpgpu.fakes.server import Emulator

from .builders import PROJECT, ZONE, gpu_vm, insert


def limited(name: str, seconds: int, action: str | None = "STOP", model: str = "STANDARD") -> compute_v1.Instance:
    body = gpu_vm(name, provisioning_model=model)
    body.scheduling.max_run_duration = compute_v1.Duration(seconds=seconds)
    if action:
        body.scheduling.instance_termination_action = action
    body.scheduling.automatic_restart = False
    return body


def status(instances: compute_v1.InstancesClient, name: str) -> str:
    return instances.get(project=PROJECT, zone=ZONE, instance=name).status


def system_ops(compute, op_type: str) -> list[tuple[str, str, str, str]]:
    ops = compute("ZoneOperationsClient").list(request={
        "project": PROJECT, "zone": ZONE, "filter": f'operationType="{op_type}"'})
    return [(o.operation_type, o.target_link.rsplit("/", 1)[-1], o.status.name, o.user) for o in ops]


def test_a_vm_is_stopped_when_its_max_run_duration_is_up(gcp: Emulator, compute, instances) -> None:
    gcp.faults.preempt_grace_s = 0.0
    insert(instances, limited("cap-0", 600))
    insert(instances, gpu_vm("free-0"))  # no limit: runs on
    inst = instances.get(project=PROJECT, zone=ZONE, instance="cap-0")
    started = parse_rfc3339(inst.last_start_timestamp)
    # Google: the termination timestamp is the limit plus the moment the VM last entered RUNNING.
    assert parse_rfc3339(inst.resource_status.scheduling.termination_timestamp) == pytest.approx(started + 600, abs=0.01)
    assert not instances.get(project=PROJECT, zone=ZONE, instance="free-0").resource_status.scheduling.termination_timestamp

    gcp.clock.advance(599)
    gcp.fault_clock.tick()
    assert status(instances, "cap-0") == "RUNNING"  # not a second early
    gcp.clock.advance(2)
    wait_for(lambda: status(instances, "cap-0") == "TERMINATED", what="cap-0 stopped by its maxRunDuration")
    ended = instances.get(project=PROJECT, zone=ZONE, instance="cap-0")
    assert parse_rfc3339(ended.last_stop_timestamp) == pytest.approx(started + 600, abs=0.01)
    assert not ended.resource_status.scheduling.termination_timestamp  # removed while stopped
    assert status(instances, "free-0") == "RUNNING"
    assert system_ops(compute, "compute.instances.stop") == [("compute.instances.stop", "cap-0", "DONE", "system")]


def test_delete_action_removes_the_vm(gcp: Emulator, compute, instances) -> None:
    gcp.faults.preempt_grace_s = 0.0
    insert(instances, limited("cap-d", 30, action="DELETE", model="SPOT"))
    gcp.clock.advance(31)
    wait_for(lambda: "cap-d" not in [i.name for i in instances.list(project=PROJECT, zone=ZONE)], what="cap-d deleted")
    assert system_ops(compute, "compute.instances.delete") == [("compute.instances.delete", "cap-d", "DONE", "system")]


def test_a_vm_started_again_gets_a_fresh_run(gcp: Emulator, instances) -> None:
    gcp.faults.preempt_grace_s = 0.0
    insert(instances, limited("cap-r", 60))
    gcp.clock.advance(61)
    wait_for(lambda: status(instances, "cap-r") == "TERMINATED", what="cap-r stopped")
    gcp.clock.advance(3600)  # stopped for an hour: no run, no limit counting
    instances.start(project=PROJECT, zone=ZONE, instance="cap-r").result()
    wait_for(lambda: status(instances, "cap-r") == "RUNNING", what="cap-r running again")
    again = instances.get(project=PROJECT, zone=ZONE, instance="cap-r")
    restarted = parse_rfc3339(again.last_start_timestamp)
    assert restarted == pytest.approx(gcp.clock.now(), abs=2)  # lastStartTimestamp is this run's start
    assert parse_rfc3339(again.resource_status.scheduling.termination_timestamp) == pytest.approx(restarted + 60, abs=0.01)
    gcp.clock.advance(61)
    wait_for(lambda: status(instances, "cap-r") == "TERMINATED", what="cap-r stopped again")


def test_stop_and_start_record_when_a_run_ended_and_began(gcp: Emulator, instances) -> None:
    """lastStopTimestamp / lastStartTimestamp, as the API reports them: what uptime and cost read."""
    insert(instances, gpu_vm("run-0"))
    gcp.clock.advance(100)
    instances.stop(project=PROJECT, zone=ZONE, instance="run-0").result()
    wait_for(lambda: status(instances, "run-0") == "TERMINATED", what="run-0 stopped")
    stopped = instances.get(project=PROJECT, zone=ZONE, instance="run-0")
    assert parse_rfc3339(stopped.last_stop_timestamp) == pytest.approx(gcp.clock.now(), abs=2)
    assert parse_rfc3339(stopped.last_stop_timestamp) - parse_rfc3339(stopped.last_start_timestamp) >= 100
    gcp.clock.advance(50)
    instances.start(project=PROJECT, zone=ZONE, instance="run-0").result()
    assert parse_rfc3339(instances.get(project=PROJECT, zone=ZONE, instance="run-0").last_start_timestamp) \
        == pytest.approx(gcp.clock.now(), abs=2)


def test_the_job_agent_hears_the_vm_ended(gcp: Emulator, instances) -> None:
    """Whatever runs on the VM goes with it, as on a preempted VM: the loss is announced on the world's events."""
    heard: list[tuple[str, str]] = []
    gcp.events.on_vm_lost(lambda project, zone, name, iid, kind, notice: heard.append((name, kind)))
    insert(instances, limited("cap-j", 45))
    gcp.clock.advance(46)
    wait_for(lambda: heard, what="the loss announced")
    assert heard == [("cap-j", "max_run_duration")]


@pytest.mark.parametrize(("body", "field"), [
    (lambda: limited("bad-short", 10), "maxRunDuration.seconds"),  # Google: 30 s at least
    (lambda: limited("bad-long", 121 * 86400), "maxRunDuration.seconds"),  # and 120 days at most
])
def test_limits_google_does_not_allow_are_refused(instances, body, field) -> None:
    with pytest.raises(exceptions.BadRequest, match=field):
        insert(instances, body())


def test_no_limit_on_legacy_preemptible_vms(instances) -> None:
    body = limited("bad-pre", 600)
    body.scheduling.preemptible = True
    with pytest.raises(exceptions.BadRequest, match="preemptible"):
        insert(instances, body)
