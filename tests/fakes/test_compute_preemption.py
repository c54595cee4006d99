"""Losing a VM on purpose: Spot preemption and host errors, as compute_v1 readers see them, from a test,
a faults file and `gcpgpu emulator faults --set`, and what happens to the processes a job ran there."""

from __future__ import annotations

import time

import pytest
from google.cloud import compute_v1
from helpers import wait_for

from gcpgpu.fakes.core import Faults
from gcpgpu.fakes.server import Emulator

from .builders import PROJECT, ZONE, gpu_vm, insert


def spot(name: str, action: str = "STOP") -> compute_v1.Instance:
    body = gpu_vm(name, provisioning_model="SPOT")
    body.scheduling.instance_termination_action = action
    body.scheduling.automatic_restart = False
    return body


def test_a_preempted_spot_vm_shows_what_the_real_api_shows(gcp: Emulator, compute, instances) -> None:
    gcp.faults.preempt_grace_s = 0.3
    insert(instances, spot("s-0"))
    insert(instances, spot("s-1"))
    gcp.faults.preempt("s-1")
    got = wait_for(lambda: instances.get(project=PROJECT, zone=ZONE, instance="s-1").status == "TERMINATED",
                   what="s-1 TERMINATED")
    assert got
    inst = instances.get(project=PROJECT, zone=ZONE, instance="s-1")
    assert inst.last_stop_timestamp  # when it stopped, as the API reports it
    assert instances.get(project=PROJECT, zone=ZONE, instance="s-0").status == "RUNNING"
    # The preemption history, read the way Google's sample reads it.
    ops = list(compute("ZoneOperationsClient").list(request={
        "project": PROJECT, "zone": ZONE, "filter": 'operationType="compute.instances.preempted"'}))
    assert [(o.operation_type, o.target_link.rsplit("/", 1)[-1], o.status.name, o.user) for o in ops] == [
        ("compute.instances.preempted", "s-1", "DONE", "system")]
    assert gcp.faults.preemptions == []  # fired once, then gone


def test_a_spot_vm_set_to_delete_goes_away(gcp: Emulator, instances) -> None:
    gcp.faults.preempt_grace_s = 0.0
    insert(instances, spot("d-0", action="DELETE"))
    gcp.faults.fail_host("d-0")
    wait_for(lambda: "d-0" not in [i.name for i in instances.list(project=PROJECT, zone=ZONE)], what="d-0 gone")


def test_after_s_counts_from_the_start_of_a_job_on_the_node(gcp: Emulator, instances) -> None:
    insert(instances, spot("j-0"))
    gcp.faults.preempt("j-0", after_s=0.5)
    assert gcp.fault_clock.tick() == []  # armed now
    gcp.clock.advance(0.6)  # past after_s, but no job runs on it: nothing happens
    assert gcp.fault_clock.tick() == []
    assert instances.get(project=PROJECT, zone=ZONE, instance="j-0").status == "RUNNING"
    inst = gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", "j-0")
    gcp.activity.begin(inst["id"], "some-job")  # what the job agent records when a job starts there
    wait_for(lambda: instances.get(project=PROJECT, zone=ZONE, instance="j-0").status in ("STOPPING", "TERMINATED"),
             what="j-0 preempted once a job ran 0.5 s")


def test_fault_strings_from_files_and_the_command_line() -> None:
    faults = Faults.from_dict({"preempt": "c-1@30s", "host_error": ["c-2", "c-3@2026-11-23T05:00:00Z"]})
    assert [(p["instance"], p["kind"], p["after_s"], p["at"]) for p in faults.preemptions] == [
        ("c-1", "preempt", 30.0, None), ("c-2", "host_error", None, None), ("c-3", "host_error", None, 1795410000.0)]
    faults.update({"preempt": "c-4@2m"})  # adds to what is armed
    assert [p["instance"] for p in faults.preemptions] == ["c-1", "c-2", "c-3", "c-4"]
    assert faults.preemptions[-1]["after_s"] == 120.0
    for bad in ("C-1@30s", "c-1@soon"):
        with pytest.raises(ValueError, match="preempt"):
            Faults.from_dict({"preempt": bad})


def test_emulator_faults_set_preempt_at_run_time(gcp: Emulator, instances) -> None:
    from click.testing import CliRunner

    from gcpgpu.cli import main

    gcp.faults.preempt_grace_s = 0.2
    insert(instances, spot("r-0"))
    result = CliRunner().invoke(main, ["--emulator", gcp.address, "--format", "json", "emulator", "faults",
                                       "--set", "preempt=r-0@2026-01-01T00:00:00Z"])
    assert result.exit_code == 0, result.output
    wait_for(lambda: instances.get(project=PROJECT, zone=ZONE, instance="r-0").status == "TERMINATED",
             what="r-0 preempted")


def test_a_preempted_node_s_job_gets_sigterm_then_sigkill(gcp: Emulator, instances, tmp_path) -> None:
    """The job agent's processes on a preempted VM: SIGTERM at the notice, SIGKILL when it ends."""
    from gcpgpu.fakes.host.runner import ReplicaSpec

    gcp.faults.preempt_grace_s = 0.5
    insert(instances, spot("p-0"))
    inst = gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", "p-0")
    # A process that notes SIGTERM and ignores it, as a trainer saving its checkpoint would keep running.
    script = tmp_path / "ignore_term.py"
    script.write_text("import signal, time, sys\n"
                      "signal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM', flush=True))\n"
                      "print('started', flush=True)\n"
                      "time.sleep(60)\n")
    import sys

    run = gcp.jobs.runner.start("cluster/x/job/p-0", [ReplicaSpec("p-0", [sys.executable, str(script)], {})])
    gcp.jobs.agent.node_runs[inst["id"]] = run.id
    wait_for(lambda: any(line.text == "started" for line in run.log_lines()), what="process started")
    t0 = time.monotonic()
    gcp.faults.preempt("p-0")
    assert run.wait(20)
    took = time.monotonic() - t0
    texts = [line.text for line in run.log_lines()]
    assert "got SIGTERM" in texts
    assert run.state == "failed" and "preempted" in run.failure[2]
    assert took >= 0.5  # killed after the notice, not before
    assert run.alive() == []
