"""A user's own PyTorch script, run by the emulator as the training image would run it.

The script (not gcpgpu's trainer) is written here: a gloo all-reduce over two processes that reads
/data/input.txt from a read-only mount and writes a result and a checkpoint to /out through a
read-write mount, resuming from its checkpoint when GCPGPU_RESUME=1. The data is put with
google-cloud-storage; the job gets its folder, setup, mounts and secret through job submit's own flags
(--env may not set gcpgpu's GCPGPU_* variables); results are read back with google-cloud-storage.

The sandbox holds whoever runs the emulator (CI and this suite's machines run it as root): a job's
command has no capability, cannot remount what it was given read-only, and a link a job planted in a
bucket never binds a folder of this machine.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main

pytest.importorskip("torch")
storage = pytest.importorskip("google.cloud.storage")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: the emulator cannot sandbox users' commands")

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
BUCKET = "user-bucket"
LAUNCH = ("torchrun --nnodes $NNODES --node-rank $NODE_RANK --nproc-per-node $NPROC_PER_NODE --master-addr $MASTER_ADDR "
          "--master-port $MASTER_PORT train.py")

TRAIN = '''
import json, os, pathlib, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
out = pathlib.Path("/out") / f"rank{rank}"
out.mkdir(parents=True, exist_ok=True)
ckpt = out / "ckpt.pt"
start = 0
if os.environ.get("GCPGPU_RESUME") == "1" and ckpt.exists():
    start = torch.load(ckpt)["step"]
words = len(open("/data/input.txt").read().split())
try:
    open("/data/written-by-job", "w").write("x")
    data_ro = False
except OSError:
    data_ro = True
t = torch.tensor([float(words * (rank + 1))])
dist.all_reduce(t)
torch.save({"step": start + 1}, ckpt)
(out / "result.json").write_text(json.dumps({"sum": t.item(), "world": dist.get_world_size(), "data_ro": data_ro,
                                             "cwd": os.getcwd(), "resumed_from": start,
                                             "setup_ran": os.path.exists("setup-done"),
                                             "token_ok": os.environ.get("HF_TOKEN") == "hf-s3cret"}))
print(f"rank {rank} sum {t.item()}")
dist.destroy_process_group()
'''


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


@pytest.fixture
def gcs(gcp):
    """google-cloud-storage as a user builds it, pointed at the emulator."""
    from google.auth.credentials import AnonymousCredentials

    return storage.Client(project="test-proj", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": gcp.url})


def put_code(gcs, tmp_path: Path) -> Path:
    """The user's folder (job submit --workdir packs and stages it), and the job's input data in its bucket."""
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    (src / "requirements.txt").write_text("")
    bucket = gcs.create_bucket(BUCKET)
    bucket.blob("inputs/input.txt").upload_from_string("one two three four five")
    return src


def put_secret(gcp) -> str:
    """A secret in the emulator's Secret Manager (plain REST, as Google's reference shapes the calls)."""
    def call(path: str, body: dict) -> None:
        req = urllib.request.Request(f"{gcp.url}/v1/{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).close()  # noqa: S310 - the emulator on loopback

    call("projects/test-proj/secrets?secretId=hf", {"replication": {"automatic": {}}})
    call("projects/test-proj/secrets/hf:addVersion", {"payload": {"data": base64.b64encode(b"hf-s3cret").decode()}})
    return "projects/test-proj/secrets/hf/versions/latest"


def job_flags(src: Path) -> list[str]:
    """What `job submit` turns into GCPGPU_WORKDIR, GCPGPU_SETUP and GCPGPU_MOUNTS."""
    return ["--workdir", str(src), "--setup", "pip install -q --no-index -r requirements.txt && touch setup-done",
            "--mount", f"gs://{BUCKET}/inputs:/data:ro", "--mount", f"gs://{BUCKET}/outputs:/out"]


def results(gcs) -> dict[int, dict]:
    bucket = gcs.bucket(BUCKET)
    found = {}
    for blob in bucket.list_blobs(prefix="outputs/"):
        match = re.fullmatch(r"outputs/rank(\d)/result.json", blob.name)
        if match:
            found[int(match.group(1))] = json.loads(blob.download_as_bytes())
    return found


def check(gcs) -> None:
    found = results(gcs)
    assert sorted(found) == [0, 1]
    for r in found.values():
        # 5 words, ranks weigh 1 and 2: the all-reduce met the other node.
        assert r["sum"] == 15.0 and r["world"] == 2
        assert r["data_ro"] and r["cwd"] == "/workdir" and r["setup_ran"]
    names = {b.name for b in gcs.bucket(BUCKET).list_blobs(prefix="outputs/")}
    assert {"outputs/rank0/ckpt.pt", "outputs/rank1/ckpt.pt"} <= names


@needs_bwrap
def test_users_script_runs_on_a_two_node_cluster_with_its_workdir_setup_mounts_and_secret(gcp, gcs, tmp_path):
    src = put_code(gcs, tmp_path)
    secret = ["--secret", f"HF_TOKEN={put_secret(gcp)}"]
    assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    result = cli("job", "submit", "--cluster", "c", "--image", "us-docker.pkg.dev/p/r/mine:1", "--wait",
                 "--command", f"bash -c '{LAUNCH}'", *job_flags(src), *secret)
    assert result.exit_code == 0, result.output + cli("job", "logs", result.stdout.splitlines()[0]).output
    check(gcs)
    assert all(r["token_ok"] for r in results(gcs).values())  # read from Secret Manager inside the sandbox
    # The data mount stayed read-only: the job could not write into the input folder.
    names = {b.name for b in gcs.bucket(BUCKET).list_blobs(prefix="inputs/")}
    assert names == {"inputs/input.txt"}
    logs = cli("job", "logs", result.stdout.splitlines()[0]).output
    assert "rank 0 sum 15.0" in logs and "unpacked into /workdir" in logs


@needs_bwrap
def test_users_script_runs_as_a_two_replica_vertex_job(gcs, tmp_path):
    src = put_code(gcs, tmp_path)
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait",
                 "--image", "us-docker.pkg.dev/p/r/mine:1", "--command", f"bash -c '{LAUNCH}'", *job_flags(src))
    assert result.exit_code == 0, result.output + cli("job", "logs", result.stdout.splitlines()[0]).output
    check(gcs)


def _sleepers(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


@needs_bwrap
def test_a_lost_node_takes_the_sandboxed_command_and_everything_it_started_with_it(gcp):
    assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    marker = "617.25"
    submit = cli("job", "submit", "--cluster", "c", "--image", "us-docker.pkg.dev/p/r/mine:1",
                 "--command", f"bash -c 'sleep {marker} & sleep {marker}; wait'")
    assert submit.exit_code == 0, submit.output
    wait_for(lambda: len(_sleepers(marker)) == 2, 30, "the job's two sleeps")
    run = next(r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/"))
    gcp.jobs.runner.lose(run.id, 0, "node c-0 was lost to a host error")  # SIGKILL now, as a dead host
    wait_for(lambda: not _sleepers(marker), 10, "no sleep left behind")
    assert run.wait(10) and run.state == "failed"


@needs_bwrap
def test_users_script_resumes_from_its_own_checkpoint_when_told_to(gcs, tmp_path):
    src = put_code(gcs, tmp_path)
    base = ["job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait",
            "--image", "us-docker.pkg.dev/p/r/mine:1", *job_flags(src)]
    assert cli(*base, "--command", f"bash -c '{LAUNCH}'").exit_code == 0
    # What a recovery sets (job submit's own: --env may not), exported here by the command itself.
    again = cli(*base, "--command", f"bash -c 'export GCPGPU_RESUME=1 GCPGPU_RESTART=1; {LAUNCH}'")
    assert again.exit_code == 0, again.output
    assert {r["resumed_from"] for r in results(gcs).values()} == {1}


def test_without_the_owners_permission_a_users_command_fails_at_once_saying_how_to_allow_it(gcp):
    gcp.user_commands.allowed = False
    try:
        vertex = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait",
                     "--image", "us-docker.pkg.dev/p/r/mine:1", "--command", "python train.py")
        assert vertex.exit_code != 0
        assert "--run-user-commands" in vertex.output
        assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone",
                   "us-central1-a", "--yes").exit_code == 0
        node = cli("job", "submit", "--cluster", "c", "--wait", "--image", "us-docker.pkg.dev/p/r/mine:1",
                   "--command", "python train.py")
        assert node.exit_code != 0
        status = json.loads(cli("job", "status", node.stdout.splitlines()[0], fmt="json").stdout)
        assert status["state"] == "FAILED"
        assert "gcpgpu emulator start --run-user-commands" in json.dumps(status)
    finally:
        gcp.user_commands.allowed = True


@needs_bwrap
def test_a_sandboxed_command_dies_with_the_emulator_even_when_it_is_killed(tmp_path):
    # SIGKILL leaves the emulator no chance to stop its jobs: the sandbox must not outlive it.
    import signal
    import subprocess
    import sys

    from gcpgpu.fakes.host.sandbox import UserCommands

    marker = "619.75"
    replica = UserCommands(True, lambda: tmp_path / "gcs").replica("t", ["sleep", marker], {}, tmp_path / "wd")
    assert replica.prepare is not None
    argv, env, fds = replica.prepare(dict(os.environ))
    parent = subprocess.Popen([sys.executable, "-c", "import json, subprocess, sys, time; "
                               "subprocess.Popen(json.loads(sys.argv[1]), env=json.loads(sys.argv[2]), "
                               "pass_fds=json.loads(sys.argv[3])); time.sleep(60)",
                               json.dumps(argv), json.dumps(env), json.dumps(fds)], pass_fds=fds)
    for fd in fds:
        os.close(fd)
    try:
        wait_for(lambda: _sleepers(marker), 30, "the sandboxed sleep")
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    wait_for(lambda: not _sleepers(marker), 10, "no sleep left behind")


def test_where_bwrap_is_missing_a_users_command_fails_with_one_line_saying_so(gcp, monkeypatch):
    monkeypatch.setattr(gcp.user_commands, "bwrap", None)
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait",
                 "--image", "us-docker.pkg.dev/p/r/mine:1", "--command", "python train.py")
    assert result.exit_code != 0 and "bubblewrap (bwrap) is not installed" in result.output


def test_a_plain_emulator_runs_no_users_command_and_the_start_option_says_how_to_allow_it():
    from gcpgpu.fakes.host.sandbox import UserCommands

    assert "--run-user-commands" in UserCommands().refusal()  # the default: refused
    help_text = CliRunner().invoke(main, ["emulator", "start", "--help"]).output
    assert "--run-user-commands" in help_text


@needs_bwrap
def test_users_script_through_job_submits_own_flags_on_a_cluster_and_on_vertex(gcp, gcs, tmp_path):
    """The issue's flow with the flags a user types: --workdir (packed and staged by gcpgpu),
    --setup, --mount, --secret and one torchrun line that serves both targets unchanged."""
    src = tmp_path / "code"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    (src / "requirements.txt").write_text("")
    (src / ".gcpgpuignore").write_text("scratch/\n")
    (src / "scratch").mkdir()
    (src / "scratch" / "big.bin").write_bytes(b"x" * 1000)
    bucket = gcs.create_bucket(BUCKET)
    bucket.blob("inputs/input.txt").upload_from_string("one two three four five")
    flags = ["--image", "us-docker.pkg.dev/p/r/mine:1", "--workdir", str(src),
             "--setup", "pip install -q --no-index -r requirements.txt && touch setup-done",
             "--mount", f"gs://{BUCKET}/inputs:/data:ro", "--mount", f"gs://{BUCKET}/outputs:/out",
             "--secret", f"HF_TOKEN={put_secret(gcp)}", "--command", LAUNCH]
    assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    dry = cli("job", "submit", "--cluster", "c", "--dry-run", *flags)
    assert dry.exit_code == 0, dry.output
    assert "hf-s3cret" not in dry.output and "big.bin" not in dry.output  # names only; ignored files stay home

    on_cluster = cli("job", "submit", "--cluster", "c", "--wait", *flags)
    assert on_cluster.exit_code == 0, on_cluster.output + cli("job", "logs", on_cluster.stdout.splitlines()[0]).output
    check(gcs)
    assert all(r["token_ok"] for r in results(gcs).values())
    for blob in bucket.list_blobs(prefix="outputs/"):
        blob.delete()

    on_vertex = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait", *flags)
    assert on_vertex.exit_code == 0, on_vertex.output + cli("job", "logs", on_vertex.stdout.splitlines()[0]).output
    check(gcs)
    assert all(r["token_ok"] for r in results(gcs).values())


IMAGE = "us-docker.pkg.dev/p/r/mine:1"
VERTEX_JOB = ["job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait", "--image", IMAGE]


def _logs(result) -> str:
    return cli("job", "logs", result.stdout.splitlines()[0]).output


@needs_bwrap
def test_a_jobs_command_holds_no_capability_whoever_runs_the_emulator(gcp):
    # Issue 36: run as root (as CI runs), bwrap kept every capability (CapEff 000001fffeffffff).
    result = cli(*VERTEX_JOB, "--command", "grep ^Cap /proc/self/status")
    logs = _logs(result)
    assert result.exit_code == 0, result.output + logs
    caps = dict(re.findall(r"(Cap\w+):\s+([0-9a-f]+)", logs))
    assert {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} <= set(caps), logs
    assert all(int(value, 16) == 0 for value in caps.values()), caps


@needs_bwrap
def test_a_jobs_command_cannot_remount_what_it_was_given_read_only(gcp, gcs):
    from gcpgpu.fakes.host.sandbox import PKG_ROOT  # this checkout (or site-packages), bound read-only

    gcs.create_bucket(BUCKET).blob("inputs/input.txt").upload_from_string("x")
    marker = PKG_ROOT / ".pwned_by_job"
    script = (f"mount -o remount,rw,bind {PKG_ROOT} && touch {marker}; "
              "mount -o remount,rw,bind /data && touch /data/pwned; echo tried both")
    try:
        result = cli(*VERTEX_JOB, "--mount", f"gs://{BUCKET}/inputs:/data:ro", "--command",
                     f"bash -c {shlex.quote(script)}")
        logs = _logs(result)
        assert result.exit_code == 0 and "tried both" in logs, result.output + logs
        assert not marker.exists()
        assert {b.name for b in gcs.bucket(BUCKET).list_blobs()} == {"inputs/input.txt"}
    finally:
        marker.unlink(missing_ok=True)  # the checkout stays clean even where the sandbox did not hold


@needs_bwrap
def test_a_link_a_job_planted_in_a_bucket_never_reaches_this_machines_folder(gcp, gcs, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("s3cret")
    gcs.create_bucket(BUCKET)
    plant = cli(*VERTEX_JOB, "--command", f"ln -sfn {host} /gcs/{BUCKET}/evil")
    assert plant.exit_code == 0, plant.output + _logs(plant)
    assert (gcp.jobs.agent.storage.root / "gcs" / BUCKET / "evil").is_symlink()

    # A sandboxed command mounting it: refused in one line, before anything runs.
    reach = cli(*VERTEX_JOB, "--mount", f"gs://{BUCKET}/evil:/data", "--command",
                "bash -c 'cat /data/secret.txt; touch /data/pwned'")
    assert reach.exit_code != 0
    status = json.loads(cli("job", "status", reach.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "FAILED"
    assert f"GCPGPU_MOUNTS: gs://{BUCKET}/evil on /data: gs://{BUCKET}/evil is a link" in json.dumps(status)
    assert "s3cret" not in _logs(reach)
    # The bundled trainer, which runs outside any sandbox, writing through it: refused too.
    trainer = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait", "--",
                  "--model", "tiny", "--ckpt-dir", f"gs://{BUCKET}/evil/ck")
    assert trainer.exit_code != 0
    assert "leads out of the emulator's storage" in trainer.output + _logs(trainer)
    assert sorted(os.listdir(host)) == ["secret.txt"]


def test_the_sandbox_hides_what_only_roots_and_services_own_in_etc(tmp_path):
    """Munge's /etc/munge (0700, its key 0600 inside): binding /dev/null over the key failed ("Can't create
    file at /etc/munge/munge.key"), so every job on an emulator run as root failed once munge was installed.
    A closed folder is covered whole and not looked into; an owner-only file is covered by itself."""
    from gcpgpu.fakes.host.sandbox import _root_only

    (tmp_path / "munge").mkdir(mode=0o700)
    (tmp_path / "munge" / "munge.key").write_text("k")
    (tmp_path / "shadow").write_text("s")
    (tmp_path / "shadow").chmod(0o600)
    (tmp_path / "hosts").write_text("h")
    (tmp_path / "hosts").chmod(0o644)
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open" / "gshadow").write_text("g")
    (tmp_path / "open" / "gshadow").chmod(0o640)
    files, folders = _root_only(str(tmp_path))
    assert files == (str(tmp_path / "open" / "gshadow"), str(tmp_path / "shadow"))
    assert folders == (str(tmp_path / "munge"),)
