"""Benchmark: how long the trainer's checkpoints block its steps, --ckpt-mode sync against async, side by side.

    python tests/bench/checkpoint.py [--trials 3] [--model tiny] [--steps 24] [--ckpt-every 8] [--nproc 1]
                                     [--bucket-latency 0.5]

The bundled trainer on CPU (gloo when --nproc > 1), a byte-level text, saving every --ckpt-every steps.
Each trial runs sync and async back to back (the order alternates) and reads every save's figures from the
trainer's own --log-json: blocked_s (the steps waited; waited_s of it for the previous upload, when saves
come faster than they upload) and save_s (until the step was complete in --ckpt-dir). The table shows the
median over trials of each run's median save. Two rows:
  - --ckpt-dir on this machine's disk: a sync save costs a write to the page cache, about what async's
    copy to host memory costs, so the two are close;
  - --ckpt-dir as slow as a bucket: the trainer's test hook adds --bucket-latency seconds to each rank's
    write into --ckpt-dir per save, in both modes alike (the sync write, the async upload), as a Cloud
    Storage FUSE mount's upload would. That latency leaves the steps' critical path in async mode.
Not collected by pytest (no test_ prefix); everything runs under __main__.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def text_file(folder: Path) -> Path:
    rng = random.Random(0)
    words = "the quick brown fox jumps over the lazy dog and then runs into a forest".split()
    path = folder / "text.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(3000)) + "\n")
    return path


def one_run(args: argparse.Namespace, mode: str, latency: float, data: Path, work: Path) -> list[dict]:
    """One trainer run; its checkpoint records."""
    log = work / "log.jsonl"
    flags = ["--model", args.model, "--data", str(data), "--batch-size", "8", "--seq-len", "64",
             "--steps", str(args.steps), "--ckpt-every", str(args.ckpt_every), "--ckpt-dir", str(work / "ckpt"),
             "--ckpt-mode", mode, "--ckpt-local-dir", str(work / "local"), "--log-json", str(log), "--quiet"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GCPGPU_TRAINER_TEST_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GCPGPU_TRAINER_TEST_SLOW_CKPT_DIR=str(latency))
    if args.nproc == 1:
        cmd = [sys.executable, "-m", "gcpgpu.trainer", *flags]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
               "-m", "gcpgpu.trainer", *flags]
    done = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"trainer failed ({mode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r.get("kind") == "checkpoint"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--model", default="tiny")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--ckpt-every", type=int, default=8)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--bucket-latency", type=float, default=0.5,
                   help="seconds added to each rank's write into --ckpt-dir per save in the second row (default 0.5)")
    args = p.parse_args()
    print(f"gcpgpu checkpoint benchmark: model {args.model} on CPU, {args.nproc} process(es), {args.steps} steps, "
          f"a save every {args.ckpt_every}; median over {args.trials} trials of each run's median save")
    rows = [("--ckpt-dir on local disk", 0.0),
            (f"--ckpt-dir + {args.bucket_latency:g} s/save (bucket)", args.bucket_latency)]
    print(f"{'':34} {'sync blocked':>13} {'async blocked':>14} {'(waited)':>10} {'async save':>11} "
          f"{'async/sync':>11}")
    for name, latency in rows:
        figures: dict[str, list[float]] = {"sync": [], "async": [], "async_save": [], "async_waited": []}
        for trial in range(args.trials):
            for mode in ("sync", "async") if trial % 2 == 0 else ("async", "sync"):
                with tempfile.TemporaryDirectory(prefix="gcpgpu-bench-ckpt-") as tmp:
                    work = Path(tmp)
                    saves = one_run(args, mode, latency, text_file(work), work)
                figures[mode].append(statistics.median(s["blocked_s"] for s in saves))
                if mode == "async":
                    figures["async_save"].append(statistics.median(s["save_s"] for s in saves))
                    figures["async_waited"].append(statistics.median(s["waited_s"] for s in saves))
        sync, asyn, waited, save = (statistics.median(figures[k]) for k in ("sync", "async", "async_waited",
                                                                             "async_save"))
        print(f"{name:34} {sync * 1e3:10.1f} ms {asyn * 1e3:11.1f} ms {waited * 1e3:7.1f} ms {save * 1e3:8.1f} ms "
              f"{asyn / sync:11.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
