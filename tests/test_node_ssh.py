"""Issue 54: working on the nodes through a real sshd on each emulated node, reached only through the
emulator's stand-in for IAP TCP forwarding: `cluster ssh --all/--nodes`, `cluster forward`,
`cluster ssh-config --write`, and what each refuses."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import PROJECT, wait_for

from gcpgpu.cli import main

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
needs_sshd = pytest.mark.skipif(
    not os.access("/usr/sbin/sshd", os.X_OK) or shutil.which("bwrap") is None or shutil.which("ssh") is None,
    reason="OpenSSH's server (openssh-server), its client or bubblewrap is not installed: emulated nodes run no sshd")
GCPGPU = str(Path(sys.executable).with_name("gcpgpu"))


def cli(*argv: str, code: int | None = 0):
    result = CliRunner().invoke(main, [*GLOBAL, *argv])
    if code is not None:
        assert result.exit_code == code, result.output
    return result


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A HOME of the test's own: gcpgpu's key, known hosts and ~/.ssh/config land there."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def two(gcp, home) -> str:
    cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
        "--iap-ssh", "--yes")
    return "c"


@needs_sshd
def test_ssh_all_runs_on_every_node_through_its_real_sshd_each_line_by_rank(gcp, two):
    out = cli("cluster", "ssh", "c", "--all", "--", "sh", "-c", "hostname; cat /etc/hostname; ps -o comm= -p $PPID")
    lines = out.stdout.splitlines()
    assert sorted(line for line in lines if line.endswith(("c-0", "c-1"))) == ["0: c-0", "0: c-0", "1: c-1", "1: c-1"]
    assert lines.count("0: sshd") == 1 and lines.count("1: sshd") == 1  # the node's OpenSSH ran it
    assert "all 2 nodes exited 0" in out.stderr


@needs_sshd
def test_ssh_all_exits_1_naming_the_node_whose_command_failed(gcp, two):
    out = cli("cluster", "ssh", "c", "--all", "--", "sh", "-c", 'echo here; test "$(hostname)" != c-1', code=1)
    assert sorted(out.stdout.splitlines()) == ["0: here", "1: here"], out.output
    assert out.stderr.strip().splitlines()[-1] == "1 of 2 nodes failed: rank 1 (c-1) exited 1"


@needs_sshd
def test_ssh_nodes_picks_ranks_and_refuses_one_the_cluster_lacks(gcp, two):
    out = cli("cluster", "ssh", "c", "--nodes", "1", "--", "hostname")
    assert out.stdout == "1: c-1\n"
    typed = CliRunner().invoke(main, [*GLOBAL, "cluster", "ssh", "c", "--nodes", "0-1", "--", "cat"], input="typed\n")
    assert (typed.exit_code, typed.stdout) == (0, "")  # no node reads the terminal: stdin is not shared
    bad = cli("cluster", "ssh", "c", "--nodes", "0,2-3", "--", "hostname", code=2)
    assert bad.output.strip() == "Error: --nodes 0,2-3: no rank 2, 3; the cluster has ranks 0-1"


@needs_sshd
def test_only_keys_in_metadata_get_in_and_a_stopped_nodes_sshd_ends_with_it(gcp, two, home):
    cli("cluster", "ssh-config", "c", "--write")
    ssh = ["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes"]
    assert subprocess.run([*ssh, "c-0", "true"], capture_output=True).returncode == 0
    stranger = home / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    refused = subprocess.run([*ssh, "-i", str(stranger), "-o", "IdentityFile=" + str(stranger), "-o",
                              "IdentitiesOnly=yes", "-o", "User=someone", "c-0", "true"], capture_output=True, text=True)
    assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr
    # A session open on node 1 ends when the node stops.
    session = subprocess.Popen([*ssh, "c-1", "sleep 600"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    iid = str(gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-1")["id"])
    wait_for(lambda: gcp.node_ssh.alive(iid), what="node c-1's sshd session")
    cli("cluster", "down", "c", "--yes")
    assert session.wait(30) == 255
    wait_for(lambda: not gcp.node_ssh.alive(iid), what="node c-1's sshd gone with it")


@needs_sshd
def test_ssh_config_write_is_idempotent_plain_ssh_works_and_down_removes_it(gcp, two, home):
    config = home / ".ssh" / "config"
    config.parent.mkdir()
    mine = "Host mybox\n    HostName 192.0.2.7\n    User me\n"
    config.write_text(mine)
    cli("cluster", "ssh-config", "c", "--write")
    first = config.read_text()
    assert first.startswith(mine) and first.count("Host c-") == 2 and "ProxyCommand" in first
    got = subprocess.run(["ssh", "-F", str(config), "c-1", "cat", "/etc/hostname"], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=60)
    assert (got.returncode, got.stdout) == (0, "c-1\n"), got.stderr
    again = cli("cluster", "ssh-config", "c", "--write")
    assert config.read_text() == first and "Already in" in again.stderr
    cli("cluster", "down", "c", "--yes")
    assert config.read_text() == mine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_sshd
def test_forward_brings_a_jobs_http_server_on_node_0_to_a_local_port(gcp, two):
    port, local = _free_port(), _free_port()
    serve = (f'echo page-of-rank-$NODE_RANK > /workdir/page.html; if [ "$NODE_RANK" = 0 ]; then exec python -m '
             f'http.server {port} --bind 127.0.0.1 --directory /workdir; else sleep 600; fi')
    cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", serve)
    env = {**os.environ, "GCPGPU_EMULATOR": gcp.address}
    proc = subprocess.Popen([GCPGPU, *GLOBAL, "cluster", "forward", "c", f"{port}:{local}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == (f"Forwarding localhost:{local} to c-0:{port} (rank 0) through IAP: browse "
                        f"http://localhost:{local}; Ctrl-C to stop\n"), proc.stderr.read() if proc.poll() else line

        def page() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{local}/page.html", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None

        assert wait_for(page, what="the job's page through the forward") == "page-of-rank-0\n"
        busy = cli("cluster", "forward", "c", f"{port}:{local}", code=2)
        assert busy.output.strip().startswith(f"Error: local port {local} is in use")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0


@pytest.mark.parametrize(("argv", "said"), [
    (("cluster", "forward", "c", "0"), "Error: PORT '0' in '0': give a port 1-65535"),
    (("cluster", "forward", "c", "6006:70000"), "Error: LOCAL '70000' in '6006:70000': give a port 1-65535"),
    (("cluster", "ssh", "c", "--all"), "Error: --all runs one command on many nodes: give it after '--'"),
    (("cluster", "ssh", "c", "--all", "--node", "1", "--", "true"), "Error: --node picks one node; --all and --nodes"),
    (("cluster", "ssh", "c", "--nodes", "x", "--", "true"), "Error: --nodes 'x': give ranks as 0,2-3"),
])
def test_bad_input_is_one_line_exit_2(gcp, home, argv, said):
    if argv[1] == "ssh" and argv[3] == "--nodes":
        cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
            "--yes")
    out = cli(*argv, code=2)
    assert out.output.strip().startswith(said) and len(out.output.strip().splitlines()) == 1, out.output


@needs_sshd
def test_rank_out_of_range_and_all_with_no_running_node_are_one_line(gcp, two):
    assert cli("cluster", "ssh", "c", "--node", "5", code=2).output.strip() == (
        "Error: --node 5: no rank 5; the cluster has ranks 0-1")
    assert cli("cluster", "forward", "c", "6006", "--node", "2", code=2).output.strip() == (
        "Error: --node 2: no rank 2; the cluster has ranks 0-1")
    from helpers import clients

    instances = clients(gcp).compute("InstancesClient")
    for name in ("c-0", "c-1"):
        instances.stop(project=PROJECT, zone="us-central1-a", instance=name).result()
    out = cli("cluster", "ssh", "c", "--all", "--", "true", code=2)
    assert out.output.strip() == ("Error: --all: cluster c has no RUNNING node (c-0 TERMINATED, c-1 TERMINATED); "
                                  "start it with 'gcpgpu cluster up c ...'")


def _job_state(jid: str) -> dict:
    import json

    return json.loads(cli("--format", "json", "job", "status", jid).stdout)


@needs_sshd
def test_job_attach_runs_a_command_inside_the_running_jobs_sandbox_seeing_its_rank_and_workdir(gcp, two):
    jid = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command",
              "sh -c 'echo mark-$NODE_RANK > /workdir/mark; exec sleep 600'").stdout.split()[0]
    wait_for(lambda: _job_state(jid)["state"] == "RUNNING", what=f"{jid} RUNNING")
    env = {**os.environ, "GCPGPU_EMULATOR": gcp.address}
    look = "echo NODE_RANK=$NODE_RANK; pwd; cat mark; ps -eo comm"

    def attached() -> str | None:
        done = subprocess.run([GCPGPU, *GLOBAL, "job", "attach", jid, "--rank", "1", "--", "sh", "-c", look],
                              env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        return done.stdout if done.returncode == 0 and "mark-1" in done.stdout else None

    lines = wait_for(attached, what="attach to see the job's mark").splitlines()
    assert lines[:3] == ["NODE_RANK=1", "/workdir", "mark-1"]
    assert "sleep" in lines[3:]  # the job's own processes: its pid namespace, as `docker exec` enters it
    assert cli("job", "attach", jid, "--rank", "2", "--", "true", code=2).output.strip() == (
        f"Error: --rank 2: job {jid} runs on ranks 0, 1")
    cli("job", "cancel", jid)
    wait_for(lambda: _job_state(jid)["state"] == "CANCELLED", what=f"{jid} CANCELLED")
    assert cli("job", "attach", jid, "--", "true", code=2).output.strip() == (
        f"Error: job {jid} is CANCELLED, not RUNNING: there is no container to attach to")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: no job runs")
def test_vertex_interactive_asks_for_web_access_and_attach_prints_each_replicas_shell(gcp, home):
    vertex = ["job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--image", "busybox",
              "--command", "sleep 600"]
    dry = cli(*vertex, "--interactive", "--dry-run")
    assert "enableWebAccess: true" in dry.stdout
    jid = cli(*vertex, "--interactive").stdout.split()[0]
    plain = cli(*vertex).stdout.split()[0]
    wait_for(lambda: _job_state(jid)["state"] == "RUNNING" and _job_state(plain)["state"] == "RUNNING",
             what="both jobs RUNNING")
    number = jid.rsplit(":", 1)[1]
    assert cli("job", "attach", jid).stdout.splitlines() == [
        f"workerpool0-0\thttps://{number}-0-0-dot-us-central1.aiplatform-training.googleusercontent.com/",
        f"workerpool1-0\thttps://{number}-1-0-dot-us-central1.aiplatform-training.googleusercontent.com/"]
    assert "INTERACTIVE SHELL" in cli("job", "status", jid).stdout
    assert cli("job", "attach", plain, code=2).output.strip() == (
        f"Error: job {plain} has no interactive shells: submit it with --interactive (Vertex AI's enableWebAccess)")
    on_cluster = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--interactive", code=2)
    assert on_cluster.output.strip().startswith("Error: --interactive is Vertex AI's (enableWebAccess")


@needs_sshd
@pytest.mark.skipif(__import__("gcpgpu.fakes.guest.slurm", fromlist=["x"]).slurm_installed() is not None,
                    reason="Slurm is not installed: the emulator's Slurm clusters cannot run")
def test_job_attach_reaches_a_slurm_jobs_container_too(gcp, home):
    cli("cluster", "up", "q", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
        "--scheduler", "slurm", "--yes")
    jid = cli("job", "submit", "--cluster", "q", "--image", "busybox", "--command",
              "sh -c 'echo mark-$NODE_RANK > /workdir/mark; exec sleep 600'").stdout.split()[0]
    wait_for(lambda: _job_state(jid)["state"] == "RUNNING", timeout=180, what=f"{jid} RUNNING under Slurm")
    env = {**os.environ, "GCPGPU_EMULATOR": gcp.address}

    def attached() -> str | None:
        done = subprocess.run([GCPGPU, *GLOBAL, "job", "attach", jid, "--rank", "1", "--", "sh", "-c",
                               "echo NODE_RANK=$NODE_RANK; cat mark"], env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        return done.stdout if done.returncode == 0 and "mark-1" in done.stdout else None

    assert wait_for(attached, what="attach to a Slurm job's container").splitlines() == ["NODE_RANK=1", "mark-1"]


def test_on_google_cloud_the_same_ssh_goes_through_gclouds_iap_tunnel_with_gclouds_key(home):
    from gcpgpu.cluster import keys
    from gcpgpu.cluster.nodessh import Reach
    from gcpgpu.cluster.observe import Node

    node = Node(name="c-1", zone="us-central1-a", status="RUNNING", internal_ip="10.0.0.3", machine_type="a3",
                gpus=8, rank=1, labels={}, label_fingerprint="", provisioning="STANDARD", reservation=None, id="42")
    reach = Reach("p", None, "ana", keys.key_file(emulated=False))
    argv = reach.argv(node, ["nvidia-smi", "-L"], batch=True)
    options = dict(argv[i + 1].split("=", 1) for i, word in enumerate(argv) if word == "-o")
    assert options["ProxyCommand"] == ("gcloud compute start-iap-tunnel c-1 %p --listen-on-stdin --project=p "
                                       "--zone=us-central1-a --verbosity=warning")
    assert options["IdentityFile"] == str(home / ".ssh" / "google_compute_engine")
    assert (options["HostKeyAlias"], options["User"], options["BatchMode"]) == ("compute.42", "ana", "yes")
    assert argv[-2:] == ["c-1", "nvidia-smi -L"]
