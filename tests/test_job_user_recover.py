"""A user's own script (not gcpgpu's trainer) survives a preempted Spot node: it resumes from its own checkpoint.

Two emulated Spot nodes run the script with the flags a user types (--workdir, --mount, --command with
torchrun, --recover); the emulator preempts one node mid-run; the follower brings the cluster back and
resubmits with GCPGPU_RESUME=1, and the script, reading that, starts where its checkpoint says. The bucket
(read with google-cloud-storage) shows each attempt's first step: 0, then past the preemption, not 0 again.
"""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

pytest.importorskip("torch")
storage = pytest.importorskip("google.cloud.storage")
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: the "
                                "emulator cannot sandbox users' commands")

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
BUCKET = "user-out"
STEPS = 30  # 0.2 s a step: the preemption at step 10 lands about 4 s before the first attempt would end
LAUNCH = ("torchrun --nnodes $NNODES --node-rank $NODE_RANK --nproc-per-node $NPROC_PER_NODE --master-addr $MASTER_ADDR "
          "--master-port $MASTER_PORT train.py")

TRAIN = f'''
import json, os, pathlib, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
out = pathlib.Path("/out")
mine = out / f"rank{{rank}}"
mine.mkdir(parents=True, exist_ok=True)
ckpt = out / "ckpt.json"  # one checkpoint, written by rank 0: every rank resumes from the same step
start = 0
if os.environ.get("GCPGPU_RESUME") == "1" and ckpt.exists():
    start = json.loads(ckpt.read_text())["step"]
with open(mine / "starts.jsonl", "a") as f:
    f.write(json.dumps({{"start": start, "restart": os.environ.get("GCPGPU_RESTART")}}) + "\\n")
for step in range(start, {STEPS}):
    t = torch.ones(1)
    dist.all_reduce(t)  # both nodes take part in every step
    time.sleep(0.2)
    if rank == 0:
        tmp = out / "ckpt.json.tmp"
        tmp.write_text(json.dumps({{"step": step + 1}}))
        os.replace(tmp, ckpt)
(mine / "done.json").write_text(json.dumps({{"start": start, "world": int(t.item())}}))
dist.destroy_process_group()
'''


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def test_a_users_script_resumes_from_its_own_checkpoint_after_a_spot_preemption(gcp, tmp_path):
    from google.auth.credentials import AnonymousCredentials

    gcs = storage.Client(project="test-proj", credentials=AnonymousCredentials(),
                         client_options={"api_endpoint": gcp.url})
    gcs.create_bucket(BUCKET)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    gcp.faults.preempt_grace_s = 1.0
    up = cli("cluster", "up", "s", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--spot", "--yes")
    assert up.exit_code == 0, up.output

    # Preempt s-1 once the script has checkpointed past step 10 (of 30), well before its end.
    ckpt = gcp.jobs.agent.storage.root / "gcs" / BUCKET / "outputs" / "ckpt.json"

    def preempt_mid_run() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if json.loads(ckpt.read_text())["step"] >= 10:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        gcp.faults.preempt("s-1")

    threading.Thread(target=preempt_mid_run, daemon=True).start()
    run = cli("job", "submit", "--cluster", "s", "--workdir", str(code), "--mount", f"gs://{BUCKET}/outputs:/out",
              "--command", LAUNCH, "--recover", "2", "--wait")
    job_id = run.stdout.splitlines()[0] if run.stdout else ""
    assert run.exit_code == 0, run.output + (cli("job", "logs", job_id).output if job_id else "")
    assert "Recovery 1/2" in run.output and "preempted" in run.output

    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1
    bucket = gcs.bucket(BUCKET)
    for rank in (0, 1):
        starts = [json.loads(line) for line in
                  bucket.blob(f"outputs/rank{rank}/starts.jsonl").download_as_text().splitlines()]
        # First attempt from 0; the recovered one was told to resume (attempt 1) and started past the preemption.
        assert starts[0]["start"] == 0 and starts[0]["restart"] is None
        assert len(starts) == 2 and starts[1]["restart"] == "1" and 10 <= starts[1]["start"] < STEPS, starts
        done = json.loads(bucket.blob(f"outputs/rank{rank}/done.json").download_as_text())
        assert done == {"start": starts[1]["start"], "world": 2}
    assert json.loads(bucket.blob("outputs/ckpt.json").download_as_text()) == {"step": STEPS}
