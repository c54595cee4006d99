"""Benchmark: goodput of a 200-step emulated cluster job preempted once, --ckpt-mode sync against async.

    python tests/bench/goodput.py [--steps 200] [--ckpt-every 25] [--preempt-at 100] [--bucket-latency 0.5]

On the emulator (in this process, as the tests run it): a Spot cluster of two nodes, and on it the bundled
trainer (tiny model, CPU, gloo) submitted with `job submit --wait`, once per mode. Once the step
--preempt-at has its checkpoint in the job's output dir, the emulator preempts the second node; the job's
follower recovers it and it resumes from its newest complete checkpoint. The trainer's test hook adds
--bucket-latency seconds to each rank's write into --ckpt-dir per save, in both modes alike, as a Cloud
Storage FUSE mount's upload would. `job status --format json`'s goodput of each run, side by side: the
share of node-time that trained, and each part of what was lost, in node-seconds.
Not collected by pytest (no test_ prefix); everything runs under __main__.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.server import Emulator
from gcpgpu.jobs.goodput import PARTS

GLOBAL = ["--project", "bench-proj", "--region", "us-central1"]


def cli(*argv: str, fmt: str = "table"):
    return CliRunner().invoke(main, [*GLOBAL, "--format", fmt, *argv])


def one_job(emu: Emulator, args: argparse.Namespace, mode: str) -> dict:
    """Submit the job in `mode`, preempt c-1 once the checkpoint of --preempt-at is complete; its status."""
    ckpt = emu.jobs.agent.storage.root / "gcs" / "bkt" / mode / "checkpoints" / f"step_{args.preempt_at:08d}"

    def preempt() -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not (ckpt / ".metadata").is_file():
            time.sleep(0.05)
        emu.faults.preempt("c-1")

    threading.Thread(target=preempt, daemon=True).start()
    trainer = ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps",
               str(args.steps), "--batch-size", "8", "--seq-len", "32", "--lr", "1e-3", "--warmup-steps", "5",
               "--log-every", "5", "--ckpt-every", str(args.ckpt_every), "--ckpt-mode", mode]
    run = cli("job", "submit", "--cluster", "c", "--output-dir", f"gs://bkt/{mode}", "--wait",
              "--env", "GCPGPU_METRICS=0", "--", *trainer)
    if run.exit_code != 0:
        sys.exit(f"the {mode} job failed:\n{run.output[-3000:]}")
    job_id = run.stdout.splitlines()[0]
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    if status["recoveries"] != 1:
        sys.exit(f"the {mode} job was not preempted once: {status['recoveries']} recoveries")
    return status


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--ckpt-every", type=int, default=25)
    parser.add_argument("--preempt-at", type=int, default=100, help="preempt once this step's checkpoint is complete")
    parser.add_argument("--bucket-latency", type=float, default=0.5, help="seconds each save's write into --ckpt-dir takes")
    args = parser.parse_args()
    if args.preempt_at % args.ckpt_every or not 0 < args.preempt_at < args.steps:
        sys.exit("--preempt-at must be a checkpoint step (a multiple of --ckpt-every) before --steps")
    with tempfile.TemporaryDirectory() as tmp:
        emu = Emulator(run_user_commands=True).start()
        emu.clock.publish(Path(tmp) / "clock.json")
        # The emulator runs the trainers with this process's environment: the test hook reaches them so.
        os.environ.update(GCPGPU_EMULATOR=emu.address, GCPGPU_CLOCK=str(Path(tmp) / "clock.json"),
                          GCPGPU_TRAINER_TEST_SLOW_CKPT_DIR=str(args.bucket_latency))
        try:
            emu.faults.preempt_grace_s = 3.0
            up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone",
                     "us-central1-a", "--spot", "--yes")
            if up.exit_code != 0:
                sys.exit(up.output)
            emu.storage.insert_bucket("bench-proj", {"name": "bkt"})  # a job mounts only a bucket that exists
            got = {mode: one_job(emu, args, mode) for mode in ("sync", "async")}
        finally:
            emu.stop()
    print(f"goodput of a {args.steps}-step job on 2 emulated nodes, preempted once after step {args.preempt_at}'s "
          f"checkpoint; a save every {args.ckpt_every} steps, {args.bucket_latency:g} s per write into --ckpt-dir")
    rows = [("goodput", lambda g: f"{g['percent']:.1f} %"), ("node-time", lambda g: f"{g['node_s']:.1f} s"),
            ("productive", lambda g: f"{g['productive_s']:.1f} s"),
            *((f"lost: {p}", lambda g, p=p: f"{g['lost_s'][p]:.1f} s") for p in PARTS),
            ("steps redone", None), ("resumed at", None)]
    print(f"{'':<20}{'sync':>12}{'async':>12}")
    for name, shown in rows:
        if shown is None:
            key = "steps_redone" if name == "steps redone" else "resumed_at"
            cells = [str(s["steps_redone"] if key == "steps_redone" else s["history"][0].get("resumed_at"))
                     for s in got.values()]
        else:
            cells = [shown(s["goodput"]) for s in got.values()]
        print(f"{name:<20}" + "".join(f"{c:>12}" for c in cells))


if __name__ == "__main__":
    main_()
