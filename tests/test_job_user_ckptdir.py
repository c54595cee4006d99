"""GCPGPU_CKPT_DIR on an emulated Spot node: a user's script writes a step folder per step into it (files, then
`.metadata` last), the node is preempted, and the recovered attempt (GCPGPU_RESUME=1) finds in it the newest
step folder that reached the job's output directory (OUTPUT/ckpt/node-0/), never the half-written one it left.
The pattern of test_job_user_recover.py, on one node and without torch.
"""

from __future__ import annotations

import json
import shutil
import threading

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: the "
                                "emulator cannot sandbox users' commands")

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
BUCKET = "user-out"
STEPS = 40

TRAIN = f'''
import json, os, pathlib, time
ckpt = pathlib.Path(os.environ["GCPGPU_CKPT_DIR"])
found = sorted(p.name for p in ckpt.iterdir())
start = json.loads((ckpt / found[-1] / "state.json").read_text())["step"] if found else 0
with open("/out/starts.jsonl", "a") as f:
    f.write(json.dumps({{"found": found, "start": start, "resume": os.environ.get("GCPGPU_RESUME")}}) + "\\n")
half = ckpt / "step_99999999"  # written, never completed: it must never come back
half.mkdir()
(half / "state.json").write_text("{{}}")
for step in range(start + 1, {STEPS} + 1):
    time.sleep(0.2)
    folder = ckpt / f"step_{{step:08d}}"
    folder.mkdir()
    (folder / "state.json").write_text(json.dumps({{"step": step}}))
    (folder / ".metadata").write_text("")  # last: the folder is complete
'''


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def test_a_users_script_finds_its_newest_uploaded_step_folder_in_gcpgpu_ckpt_dir_after_a_preemption(gcp, tmp_path):
    (gcp.jobs.agent.storage.root / "gcs" / BUCKET).mkdir(parents=True)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    gcp.faults.preempt_grace_s = 1.0
    up = cli("cluster", "up", "s", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
             "--spot", "--yes")
    assert up.exit_code == 0, up.output

    uploaded = gcp.jobs.agent.storage.root / "gcs" / BUCKET / "run" / "ckpt" / "node-0"

    def preempt_mid_run() -> None:  # once step 10 (of 40) is complete in the bucket
        wait_for(lambda: (uploaded / "step_00000010" / ".metadata").exists(), 300, "step 10 in the bucket")
        gcp.faults.preempt("s-0")

    threading.Thread(target=preempt_mid_run, daemon=True).start()
    run = cli("job", "submit", "--cluster", "s", "--workdir", str(code), "--output-dir", f"gs://{BUCKET}/run",
              "--mount", f"gs://{BUCKET}/log:/out", "--command", "python3 train.py", "--recover", "1", "--wait")
    job_id = run.stdout.splitlines()[0] if run.stdout else ""
    assert run.exit_code == 0, run.output + (cli("job", "logs", job_id).output if job_id else "")
    assert "Recovery 1/1" in run.output and "preempted" in run.output

    starts = [json.loads(line) for line in
              (gcp.jobs.agent.storage.root / "gcs" / BUCKET / "log" / "starts.jsonl").read_text().splitlines()]
    assert starts[0] == {"found": [], "start": 0, "resume": None}
    # The recovered attempt: exactly one folder, a complete one from past the preemption, not the half one.
    second = starts[1]
    assert second["resume"] == "1" and 10 <= second["start"] < STEPS, starts
    assert second["found"] == [f"step_{second['start']:08d}"]
    assert (uploaded / f"step_{STEPS:08d}" / ".metadata").is_file()  # the last step, uploaded after the end
    assert not (uploaded / "step_99999999").exists()
    logs = cli("job", "logs", job_id).output
    assert f"(GCPGPU_CKPT_DIR): step_{second['start']:08d} restored from gs://{BUCKET}/run/ckpt/node-0/" in logs
