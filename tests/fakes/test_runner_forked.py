"""gcpgpu's own helpers (node agents, Slurm node supervisors, metrics reporters) are forked from a template
process that imported them once (gcpgpu/fakes/host/forked.py), yet each is still a process of its own, as
on a real node: its own session, the environment, folder and arguments it was given, its output in the
run's log, its exit code the run's; and it dies with the emulator's process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import free_port, wait_for

from gcpgpu.fakes.host import forked
from gcpgpu.fakes.host.procs import start_time
from gcpgpu.fakes.host.runner import ReplicaSpec, Runner

PROBE = "fakes.forked_probe"  # tests/fakes/forked_probe.py


@pytest.fixture
def probe_forked(monkeypatch):
    monkeypatch.setattr(forked, "MODULES", (*forked.MODULES, PROBE))
    monkeypatch.delenv("GCPGPU_EMULATOR_FORK", raising=False)


def _said(run) -> dict:
    return json.loads(next(line.text for line in run.log_lines() if line.text.startswith("{")))


@pytest.mark.parametrize("code, state", [(0, "succeeded"), (3, "failed")])
def test_a_forked_helper_is_its_own_process_with_what_it_was_given(probe_forked, tmp_path, code, state):
    runner = Runner(root=tmp_path / "runs")
    try:
        run = runner.start("agent-1", [ReplicaSpec("node-0", [sys.executable, "-m", PROBE, str(code), "--x", "y z"],
                                                   {"FOO": "bar"})])
        assert run.wait(60) and run.state == state, [line.text for line in run.log_lines()]
        said = _said(run)
        assert said["preloaded"]  # forked from the template, which imported Compute's client once
        assert said["ppid"] != os.getpid()
        assert said["sid"] == said["pgid"] == said["pid"] == run.pids()[0]  # its own session, as a subprocess's
        assert said["cwd"] == str(run.workdir)
        assert said["argv"] == [str(code), "--x", "y z"]
        assert said["stdin"] == ""
        assert said["env"]["FOO"] == "bar" and said["env"]["PYTHONUNBUFFERED"] == "1"
        assert said["env"] == {**{k: v for k, v in os.environ.items() if k in said["env"]}, "FOO": "bar",
                               "PYTHONUNBUFFERED": "1", "PYTHONPATH": said["env"]["PYTHONPATH"], "GCPGPU_DIE_WITH_PARENT": "1",
                               **{k: said["env"][k] for k in ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME")}}
        assert ("stderr", "a line on stderr") in [(line.stream, line.text) for line in run.log_lines()]
        assert run.replicas[0].returncode == code
        if code:
            assert run.failure == ("node-0", code, "a line on stderr")
    finally:
        runner.reset()


def test_a_forked_helper_is_killed_with_its_group_when_its_node_is_lost(probe_forked, tmp_path):
    runner = Runner(root=tmp_path / "runs")
    try:
        run = runner.start("agent-1", [ReplicaSpec("node-0", [sys.executable, "-m", PROBE, "sleep"], {})])
        wait_for(lambda: any(line.text.startswith("{") for line in run.log_lines()), timeout=60, what="the helper up")
        runner.lose("agent-1", 0.0, "node node-0 is no longer RUNNING")
        assert run.wait(30) and run.state == "failed"
        assert run.replicas[0].returncode == -signal.SIGKILL
        assert start_time(_said(run)["pid"]) is None
    finally:
        runner.reset()


def test_forked_helpers_die_with_the_emulators_process_however_it_ends(tmp_path):
    """An emulator killed outright (a pytest worker killed mid-test) leaves none of its helpers running."""
    script = textwrap.dedent(f"""
        import signal, sys, time
        from gcpgpu.fakes.host import forked
        from gcpgpu.fakes.host.runner import ReplicaSpec, Runner
        forked.MODULES = (*forked.MODULES, {PROBE!r})
        run = Runner(root={str(tmp_path / 'runs')!r}).start("a", [ReplicaSpec("n", [sys.executable, "-m", {PROBE!r}, "sleep"], {{}})])
        while not any(line.text.startswith("{{") for line in run.log_lines()):
            time.sleep(0.05)
        print(next(line.text for line in run.log_lines() if line.text.startswith("{{")), flush=True)
        signal.pause()  # until the test kills this process
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    env.pop("GCPGPU_EMULATOR_FORK", None)
    emulator = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        helper = json.loads(emulator.stdout.readline())["pid"]
        assert start_time(helper) is not None
        emulator.kill()  # SIGKILL: no atexit, no cleanup of its own
        emulator.wait(30)
        wait_for(lambda: start_time(helper) is None, timeout=30, what="the helper gone with the emulator's process")
    finally:
        emulator.kill()
        emulator.wait(30)


# What a bundled trainer's replica is without a sandbox: a launcher (torchrun) whose worker runs in a session
# of its own, as torchrun starts them. Neither writes to the emulator's pipes once started (a write there would
# end them anyway); the worker logs its steps to a file.
LAUNCHER = ("import subprocess, sys; w = subprocess.Popen([sys.executable, '-m', 'gcpgpu.trainer', '--model', 'tiny', "
            "'--steps', '100000', '--seq-len', '16', '--batch-size', '2', '--data', 'synthetic', '--log-every', '1', "
            "'--quiet', '--log-json', sys.argv[1]], start_new_session=True, stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL); print('worker', w.pid, flush=True); w.wait()")


def test_a_bundled_trainers_launcher_and_workers_die_with_the_emulators_process(tmp_path):
    """Issue 37: a pytest worker killed mid-test left its emulator's torchrun and trainers running."""
    steps = tmp_path / "steps.jsonl"
    script = textwrap.dedent(f"""
        import signal, sys, time
        from pathlib import Path
        from gcpgpu.fakes.host.runner import ReplicaSpec, Runner
        run = Runner(root={str(tmp_path / 'runs')!r}).start(
            "a", [ReplicaSpec("n", [sys.executable, "-c", {LAUNCHER!r}, {str(steps)!r}],
                              {{"GCPGPU_TRAINER_ALLOW_CPU": "1"}})])
        while not (Path({str(steps)!r}).exists() and '"step"' in Path({str(steps)!r}).read_text()):
            time.sleep(0.05)  # the worker is training
        worker = next(line.text for line in run.log_lines() if line.text.startswith("worker")).split()[1]
        print(run.pids()[0], worker, flush=True)
        signal.pause()  # until the test kills this process
    """)
    env = {k: v for k, v in os.environ.items() if k != "GCPGPU_EMULATOR_FORK"}
    emulator = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in emulator.stdout.readline().split()]
        assert len(pids) == 2 and all(start_time(p) is not None for p in pids)
        emulator.kill()
        emulator.wait(30)
        wait_for(lambda: all(start_time(p) is None for p in pids), timeout=30,
                 what="the launcher and its worker gone with the emulator's process")
    finally:
        emulator.kill()
        emulator.wait(30)


def test_the_forkserver_preloads_the_compute_services_its_helpers_use_not_the_whole_package():
    # What the forkserver imports (its PRELOAD, in order, as multiprocessing does): the followers' and Slurm
    # supervisors' Compute services, so they start warm, without compute_v1's __init__ importing all ~100.
    script = textwrap.dedent(f"""
        import json, sys
        for name in {list(forked.PRELOAD)!r}:
            __import__(name)
        package = vars(sys.modules.get("google.cloud.compute_v1", json))
        prefix = "google.cloud.compute_v1.services."
        print(json.dumps({{"services": sorted(m[len(prefix):] for m in sys.modules
                                              if m.startswith(prefix) and m.count(".") == 4),
                          "whole_package": "InstancesClient" in package,
                          "monitoring": "google.cloud.monitoring_v3" in sys.modules,
                          "torch": "torch.distributed.elastic.agent.server.api" in sys.modules}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    got = json.loads(out.splitlines()[-1])
    assert not got["whole_package"]
    assert {"instances", "projects", "zone_operations", "region_operations", "global_operations"} <= set(got["services"])
    assert len(got["services"]) < 20
    assert got["monitoring"]
    assert got["torch"]  # the emulator's torchrun starts with torch imported


@pytest.mark.parametrize(("worker_code", "state", "code"), [(0, "succeeded", 0), (3, "failed", 1)])
def test_the_emulators_torchrun_is_forked_warm_and_ends_as_torchrun_does(tmp_path, monkeypatch, worker_code, state,
                                                                         code):
    """A bundled-trainer node's launcher (gcpgpu.trainer.torchrun) comes from the forkserver, which imported torch
    once; torchrun still starts its worker as a process of its own, and its exit code and failure report are
    torchrun's. No runpy warning about a preloaded module reaches the log."""
    from gcpgpu.trainer.argv import TORCHRUN_MODULE

    monkeypatch.delenv("GCPGPU_EMULATOR_FORK", raising=False)
    worker = tmp_path / "worker.py"
    worker.write_text(f"import os, sys\nprint('rank', os.environ['RANK'], os.getppid(), flush=True)\n"
                      f"sys.exit({worker_code})\n")
    runner = Runner(root=tmp_path / "runs")
    try:
        run = runner.start("job-1", [ReplicaSpec("node-0", [sys.executable, "-m", TORCHRUN_MODULE, "--standalone",
                                                            "--nproc-per-node", "1", str(worker)], {})])
        assert run.wait(300), [line.text for line in run.log_lines()]
        texts = [line.text for line in run.log_lines()]
        assert isinstance(run.replicas[0].popen, forked.Forked)
        assert run.state == state and run.replicas[0].returncode == code, texts
        (started,) = [t for t in texts if t.startswith("rank 0 ")]
        assert int(started.split()[2]) == run.pids()[0]  # torchrun's own child, not a fork of the template
        assert not [t for t in texts if "RuntimeWarning" in t], texts
        if worker_code:
            assert any("ChildFailedError" in t for t in texts) and any("exitcode  : 3" in t for t in texts), texts
    finally:
        runner.reset()


def test_a_vertex_replicas_launcher_is_forked_and_a_training_process_is_not(tmp_path, monkeypatch):
    """With CLUSTER_SPEC, `python -m gcpgpu.trainer` is Vertex AI's launcher (torchrun in its own process): it comes
    from the forkserver. Without it (a worker, or a cluster job whose command is the trainer), it trains, and
    starts fresh, so torch reads its environment at import as on a node."""
    from gcpgpu.trainer.argv import MODULE

    monkeypatch.delenv("GCPGPU_EMULATOR_FORK", raising=False)
    argv = [sys.executable, "-m", MODULE, "--model", "tiny", "--steps", "2", "--seq-len", "16", "--batch-size", "2",
            "--data", "synthetic"]
    spec = json.dumps({"cluster": {"workerpool0": [f"127.0.0.1:{free_port()}"]}, "environment": "cloud",
                       "task": {"type": "workerpool0", "index": 0, "trial": ""}, "job": "{}"})
    assert forked.module_of(argv, {"CLUSTER_SPEC": spec}) == MODULE
    assert forked.module_of(argv, {"CLUSTER_SPEC": spec, "LOCAL_RANK": "0"}) is None
    assert forked.module_of(argv, {}) is None and forked.module_of(argv) is None
    runner = Runner(root=tmp_path / "runs")
    try:
        run = runner.start("vertex-1", [ReplicaSpec("workerpool0-0", argv, {
            "CLUSTER_SPEC": spec, "GCPGPU_NPROC_PER_NODE": "1", "GCPGPU_TRAINER_ALLOW_CPU": "1"})])
        assert run.wait(300)
        texts = [line.text for line in run.log_lines()]
        assert isinstance(run.replicas[0].popen, forked.Forked)
        assert run.state == "succeeded", texts
        assert any(t.startswith("gcpgpu.trainer: CLUSTER_SPEC -> torchrun ") for t in texts), texts
        assert not [t for t in texts if "RuntimeWarning" in t], texts
    finally:
        runner.reset()



def _pipes_open() -> list[str]:
    """This process's open pipes and sockets (what a launch opens to talk to its child and the forkserver)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(("pipe:", "socket:")):
            out.append(target)
    return out


def test_forked_launches_leave_no_descriptor_open_once_they_end(probe_forked, tmp_path):
    """Each forked helper held its forkserver sentinel and data pipe for as long as the emulator kept its run
    (for ever): about four descriptors per job, 130 after a 35-job soak. After N ended runs the emulator's
    process holds as many pipes as it did after the first."""
    runner = Runner(root=tmp_path / "runs")
    try:
        first = runner.start("warm", [ReplicaSpec("node-0", [sys.executable, "-m", PROBE, "0"], {})])
        assert first.wait(60) and first.state == "succeeded"  # the forkserver is up: its own pipes are the baseline
        baseline = len(_pipes_open())
        for i in range(6):
            run = runner.start(f"agent-{i}", [ReplicaSpec(f"node-{n}", [sys.executable, "-m", PROBE, str(i % 2)], {})
                                              for n in range(2)])
            assert run.wait(60) and run.state == ("succeeded", "failed")[i % 2]
        assert len(runner.all_runs()) == 7  # the emulator keeps its runs (their logs): they must not keep pipes
        wait_for(lambda: len(_pipes_open()) <= baseline, timeout=30,
                 what=f"the pipes back to {baseline} (open: {len(_pipes_open())})")
    finally:
        runner.reset()
