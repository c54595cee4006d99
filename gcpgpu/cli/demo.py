"""`make demo`: a walk-through a newcomer can watch, against the offline emulator.

It starts `gcpgpu emulator start` as its own process (as a user would), then runs real commands
against it, printing each one first. No cloud, no credentials: everything is simulated.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")
# A user's own script (not gcpgpu's trainer): what `job submit --workdir` carries to every node.
USER_SCRIPT = """\
import os, pathlib
import torch
import torch.distributed as dist

# One process per node: the node's rank and the node count are the process's (MASTER_ADDR/PORT as well).
dist.init_process_group("gloo", rank=int(os.environ["NODE_RANK"]), world_size=int(os.environ["NNODES"]))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
out = pathlib.Path("/out")
(out / f"rank{rank}.txt").write_text(f"sum {t.item():g} over {world} processes, run from {os.getcwd()}\\n")
print(f"rank {rank} of {world}: all-reduce sum {t.item():g}; wrote /out/rank{rank}.txt")
dist.destroy_process_group()
"""
LAUNCH = "python train.py"  # or a torchrun line with $NNODES $NODE_RANK $NPROC_PER_NODE $MASTER_ADDR $MASTER_PORT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(text: str) -> None:
    print(f"\n{BOLD}== {text}{RESET}", flush=True)


def run(argv: list[str], env: dict[str, str], check: bool = True, quiet: bool = False) -> int:
    """Show a command, run it, show its output (only its errors when quiet)."""
    shown = " ".join(a if a and " " not in a else repr(a) for a in argv)
    print(f"{DIM}${RESET} {shown}", flush=True)
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL if quiet else None)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo step failed (exit {proc.returncode}): {shown}")
    return proc.returncode


def capture(argv: list[str], env: dict[str, str]) -> str:
    """Run a command that prints one value (e.g. a job id) and return it."""
    shown = " ".join(a if a and " " not in a else repr(a) for a in argv)
    print(f"{DIM}${RESET} {shown}", flush=True)
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo step failed (exit {proc.returncode}): {shown}")
    value = proc.stdout.strip().splitlines()[-1]
    print(value, flush=True)
    return value


def wait_until_up(server: subprocess.Popen, said: Path, address: str, timeout: float = 60.0) -> None:
    """Until the emulator this demo started says it serves (its banner's last line), and answers: another
    emulator already on the port must not stand in for it. One that exits (a port it cannot have) ends the
    demo with its own one-line error and exit status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            lines = said.read_text(errors="replace").strip().splitlines() if said.exists() else []
            print(lines[-1] if lines else f"the emulator exited ({server.returncode})", file=sys.stderr)
            raise SystemExit(server.returncode or 1)
        if "Stop with Ctrl-C" in (said.read_text(errors="replace") if said.exists() else ""):
            try:
                with urllib.request.urlopen(f"http://{address}/_emulator/info", timeout=1):  # noqa: S310 - loopback
                    return
            except OSError:
                pass
        time.sleep(0.1)
    raise SystemExit(f"the emulator did not come up on {address}")


def ports(argv: list[str]) -> tuple[int, int]:
    """The REST and gRPC ports asked for (`make demo PORT=8085 GRPC_PORT=8086`: --port, --grpc-port); a free
    REST port and a free gRPC port when not. `gcpgpu emulator start` refuses a bad or taken one in one line."""
    import argparse

    parser = argparse.ArgumentParser(prog="make demo", description="gcpgpu's walk-through on the emulator")
    parser.add_argument("--port", type=int, default=0, help="the emulator's REST port (make demo PORT=N)")
    parser.add_argument("--grpc-port", type=int, default=0, help="its gRPC port (make demo GRPC_PORT=N)")
    args = parser.parse_args(argv)
    return (args.port or free_port()), args.grpc_port


def main(argv: list[str] | None = None) -> None:
    bin_dir = Path(sys.executable).parent
    gcpgpu = str(bin_dir / "gcpgpu") if (bin_dir / "gcpgpu").exists() else "gcpgpu"
    port, grpc_port = ports(sys.argv[1:] if argv is None else argv)
    address = f"127.0.0.1:{port}"
    scratch = Path(tempfile.mkdtemp(prefix="gcpgpu-demo-"))
    # A small text to train on: the README this demo ships with, or the package's own source.
    readme = Path(__file__).resolve().parents[2] / "README.md"
    text = readme if readme.exists() else Path(__file__)
    env = {**os.environ, "GCPGPU_EMULATOR": address, "CLOUDSDK_CONFIG": str(scratch / "gcloud"),
           "GOOGLE_CLOUD_PROJECT": "demo-project", "CLOUDSDK_COMPUTE_REGION": "us-central1"}

    say("Start the offline GCP emulator (everything below is simulated; no cloud, no credentials)")
    grpc = ["--grpc-port", str(grpc_port)] if grpc_port else []
    start = [gcpgpu, "emulator", "start", "--port", str(port), *grpc, "--operation-seconds", "1",
             "--run-user-commands"]
    print(f"{DIM}${RESET} {' '.join(start)} &", flush=True)
    said = scratch / "emulator.log"  # its banner, and its one line should it refuse a port
    with open(said, "wb") as err:
        server = subprocess.Popen(start, env=env, stderr=err)
    try:
        wait_until_up(server, said, address)
        run([gcpgpu, "emulator", "info"], env)

        say("The GPU machine catalog the tool validates against (and the emulator serves)")
        run([gcpgpu, "catalog"], env, quiet=False)

        say("Bad input stops before any API call, with one line saying what would be right")
        run([gcpgpu, "cluster", "up", "demo", "--machine-type", "a3-highgpu-9g", "--nodes", "4"], env, check=False)

        say("What a 4-node A3 High cluster needs: placement policy, 4 GPU NIC networks, internal-only firewalls")
        run([gcpgpu, "cluster", "plan", "demo", "--machine-type", "a3-highgpu-8g", "--nodes", "4"], env)

        say("Make us-central1-a run out of a3-highgpu-8g, as real zones do, then bring the cluster up")
        run([gcpgpu, "emulator", "faults", "--set", 'capacity={"us-central1-a": {"a3-highgpu-8g": 0}}'], env,
            quiet=True)
        run([gcpgpu, "cluster", "up", "demo", "--machine-type", "a3-highgpu-8g", "--nodes", "4", "--yes"], env)

        say("Running it again reconciles: nothing is created twice")
        run([gcpgpu, "cluster", "up", "demo", "--machine-type", "a3-highgpu-8g", "--nodes", "4", "--yes"], env,
            quiet=True)
        run([gcpgpu, "cluster", "list"], env)

        say("Is every node ready to train? Driver, GPUs, GPU NICs and links, GPUDirect pieces (from the nodes)")
        run([gcpgpu, "cluster", "doctor", "demo"], env)

        say("A fresh cluster runs nothing yet: idle GPUs, near-zero traffic")
        run([gcpgpu, "metrics", "tail", "--cluster", "demo", "--once"], env)

        if shutil.which("gcloud"):
            say("gcloud, pointed at the same emulator, sees the same VMs")
            # Every API the emulator serves (compute, aiplatform, logging, monitoring), in a scratch config.
            print(f'{DIM}${RESET} eval "$({gcpgpu} emulator gcloud-env)"', flush=True)
            setup = subprocess.run([gcpgpu, "emulator", "gcloud-env", "--config-dir", str(scratch / "gcloud")], env=env,
                                   capture_output=True, text=True, check=True).stdout
            subprocess.run(["bash", "-c", setup], env=env, capture_output=True, check=True)
            run(["gcloud", "compute", "instances", "list", "--filter=labels.gcpgpu-cluster=demo"], env)

        say("The NCCL settings the training image applies on this machine family (GPUDirect-TCPX)")
        run([gcpgpu, "nccl", "env", "--machine-type", "a3-highgpu-8g"], env)

        say("Will a 350M model fit? Memory per GPU before anything runs")
        run([gcpgpu, "plan", "memory", "--model", "350m", "--batch-size", "64", "--machine-type", "a3-highgpu-8g"],
            env)

        say("A 4-node Vertex AI job on spot H100s, as the request it would send (--dry-run)")
        run([gcpgpu, "job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--nodes", "4", "--spot",
             "--dry-run", "--", "--model", "124m", "--parallel", "fsdp", "--precision", "bf16", "--steps", "1000",
             "--batch-size", "64"], env)

        trainer = ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", str(text), "--seq-len", "64",
                   "--lr", "1e-3", "--warmup-steps", "2", "--log-every", "2"]
        say("A real one: the emulator runs the bundled trainer as 2 Vertex replicas on this machine (CPU, gloo)")
        job = capture([gcpgpu, "job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                       "--name", "tiny-demo", "--", *trainer, "--steps", "20", "--batch-size", "8"], env)
        run([gcpgpu, "job", "logs", job, "--follow"], env)
        run([gcpgpu, "job", "status", job], env)

        say("The same trainer as a job on the cluster's first 2 nodes (ranks from the nodes, followed to the end)")
        run([gcpgpu, "job", "submit", "--cluster", "demo", "--nodes", "2", "--wait", "--", *trainer,
             "--steps", "10", "--batch-size", "16"], env)
        run([gcpgpu, "job", "list"], env)

        say("Which node is behind? Network and GPU metrics from Cloud Monitoring next to the trainer's throughput")
        # Slow one emulated node down, then train on the cluster with a metrics log the job's reporter
        # sends to Cloud Monitoring; `metrics tail` joins both in one view.
        # The job runs on ranks 0 and 1 (demo-0, demo-1): slow demo-1 down; demo-2 and demo-3 stay idle.
        # The nodes' Ops Agent collects every 10 s here (its collection_interval), so a short job shows.
        run([sys.executable, "-m", "gcpgpu.fakes.monitoring", "straggler", "demo-1", "0.5"], env, quiet=True)
        run([sys.executable, "-m", "gcpgpu.fakes.monitoring", "agents", "--interval", "10"], env, quiet=True)
        log = scratch / "train.jsonl"
        run([gcpgpu, "job", "submit", "--cluster", "demo", "--nodes", "2", "--wait", "--", *trainer,
             "--steps", "30", "--batch-size", "16", "--log-json", str(log)], env)
        run([gcpgpu, "metrics", "tail", "--cluster", "demo", "--once"], env)

        say("Your own code: a folder, a setup command, a bucket mounted at /out and a command "
            "(the same flags run it on Vertex AI)")
        code = scratch / "code"
        code.mkdir()
        (code / "train.py").write_text(USER_SCRIPT)
        (code / "requirements.txt").write_text("")
        if shutil.which("bwrap"):
            # A job mounts only a bucket that exists, as on Google Cloud: make the one it writes to first.
            from gcpgpu.gcp.clients import Clients

            print(f"{DIM}(the bucket it writes to, gs://demo-project-runs, is made first: a job mounts only a "
                  f"bucket that exists){RESET}", flush=True)
            Clients(address, "demo-project").storage().create_bucket("demo-project-runs", location="US-CENTRAL1")
            own = capture([gcpgpu, "job", "submit", "--cluster", "demo", "--nodes", "2",
                           "--image", "us-docker.pkg.dev/demo-project/mine/train:1", "--workdir", str(code),
                           "--setup", "pip install -q --no-index -r requirements.txt",
                           "--mount", "gs://demo-project-runs/run1:/out", "--command", LAUNCH], env)
            run([gcpgpu, "job", "logs", own, "--follow"], env)
            run([gcpgpu, "job", "status", own], env)
        else:
            say("(skipped: the emulator runs users' commands only inside bubblewrap, which is not installed here)")

        say("Tear it all down: nodes, then placement policy, Cloud NAT, firewall rules, subnetworks, networks")
        run([gcpgpu, "cluster", "down", "demo", "--yes"], env)
        run([gcpgpu, "cluster", "list"], env)

        say("Done: the emulator is stopped and nothing is left behind")
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
