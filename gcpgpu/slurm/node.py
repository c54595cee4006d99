"""What a node of a Slurm cluster runs: `python -m gcpgpu.slurm.node --project P --cluster C --node N`.

It renders the cluster's slurm.conf, topology.conf and gres.conf (conf.py) from the cluster's nodes as
Compute lists them, writes the cluster's munge key (read from Secret Manager, whose name the node's
metadata gives: never the key itself) and runs, in the foreground, munged, then slurmctld on node 0,
then slurmd under the node's own name. It is their parent and their children's subreaper: a daemon
that exits ends the others and this process (its supervisor starts it again), and when the VM goes
every job step under slurmd goes with it, as on a machine that is switched off.

On a real node the startup script's unit gcpgpu-slurm (templates/startup.sh.j2) runs this from gcpgpu's
training image, which carries Slurm (containers/Dockerfile, one pinned version, so every node and the
controller run the same one): host network (Slurm's own ports, the metadata server), host pid (so Slurm
tracks its job steps, and a step's agent enters the host: task.py), --dir and --run-dir bound at the same
paths, and on node 0 the cluster's Slurm state disk mounted at DIR/state (cluster/slurm_state.py), so the
queue outlives node 0. Its defaults are what that unit gives it.

In the emulator (--emulator) every node shares one host: --dir is the cluster's own folder there,
--state-dir node 0's state disk's folder, --port-base gives slurmctld its port and node r's slurmd port
base + 1 + r, and the GPUs are links to /dev/null (Slurm needs a file per GPU).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import grp
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from gcpgpu.cluster.names import node_name
from gcpgpu.cluster.observe import Node, observe_nodes
from gcpgpu.cluster.slurm_state import MUNGE_KEY
from gcpgpu.node import service

from . import conf
from .queue import QueueAgent

DEFAULT_DIR = "/var/lib/gcpgpu-slurm"  # templates/startup.sh.j2 binds it into the container at the same path
STATE_DIR = "state"  # under --dir: where node 0's startup script mounts the Slurm state disk (cluster/slurm_state.py)
DEFAULT_RUN_DIR = "/run/gcpgpu-slurm"
SECRETMANAGER_URL = "https://secretmanager.googleapis.com"
TOKEN_URL = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
SOCKET_WAIT_S = 15.0
STOP_GRACE_S = 10.0
_PR_SET_CHILD_SUBREAPER = 36


class Going(Exception):
    """SIGTERM: the node shuts down."""


@dataclass(frozen=True)
class Paths:
    """Where one node keeps its files: the cluster's folder, and this node's own under it."""

    root: Path
    node: str
    run: Path = Path(DEFAULT_RUN_DIR)  # short-lived files: munged's socket (a path under 108 bytes), key, pid
    state_dir: Path | None = None  # slurmctld's StateSaveLocation; None: ROOT/state

    @property
    def state(self) -> Path:
        return self.state_dir or self.root / STATE_DIR

    @property
    def jobs(self) -> Path:
        """The jobs' files (queue.py): on every node at the same path, where a job's tasks read it."""
        return self.root / "jobs"

    @property
    def own(self) -> Path:
        return self.root / "nodes" / self.node

    @property
    def conf(self) -> Path:
        return self.own / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.run / self.node


def conf_path(root: str | os.PathLike, node: str) -> Path:
    """SLURM_CONF for node `node` of the cluster whose folder is `root` (what sbatch and squeue read)."""
    return Paths(Path(root), node).conf


def layout(cluster: str, nodes: list[Node], me: Node, paths: Paths, emulated: bool, port_base: int | None) -> conf.Layout:
    """The cluster as slurm.conf describes it, from its nodes (the size `up` wrote, else those listed)."""
    count = me.expected_nodes or max((n.rank or 0) for n in nodes) + 1
    topology = {n.name: (n.block, n.subblock) for n in nodes if n.block}
    root = paths.root
    return conf.Layout(
        cluster=cluster, controller="localhost" if emulated else node_name(cluster, 0),
        nodes=conf.slurm_nodes(cluster, me.machine_type, count, topology, port_base),
        state_dir=str(paths.state), spool_dir=str(root / "spool"), run_dir=str(root / "run"),
        log_dir=str(root / "log"), controller_port=port_base if port_base is not None else conf.CONTROLLER_PORT,
        # munged of our own on every node, real or emulated: the image runs no system munged, and its key is
        # the cluster's (Secret Manager), never a file of the image's.
        munge_socket=str(paths.munge_dir / "munge.sock"),
        node_host="127.0.0.1" if emulated else None, emulated=emulated, gpu_dir=str(root / "gpus") if emulated else "/dev",
        slurmd_timeout=10 if emulated else 60, submitters=grp.getgrgid(os.getgid()).gr_name)


def write_files(lay: conf.Layout, paths: Paths, key: bytes) -> None:
    """The node's configuration files, its spool folder, the GPU stand-ins and the munge key (mode 400)."""
    paths.own.mkdir(parents=True, exist_ok=True)
    for where in (lay.state_dir, lay.run_dir, lay.log_dir, f"{lay.spool_dir}/{paths.node}", paths.jobs):
        Path(where).mkdir(parents=True, exist_ok=True)
    if lay.emulated:
        gpus = Path(lay.gpu_dir)
        gpus.mkdir(exist_ok=True)
        for i in range(max((n.gpus for n in lay.nodes), default=0)):
            link = gpus / f"nvidia{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
    for name, text in conf.write_all(lay).items():
        tmp = paths.own / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, paths.own / name)
    paths.munge_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_file = paths.munge_dir / "munge.key"
    with contextlib.suppress(FileNotFoundError):
        key_file.unlink()
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(key)


def munge_key(secret: str, endpoint: str, token: str | None) -> bytes:
    """The cluster's munge key: the secret's latest version, base64 text (cluster/munge.py made it)."""
    url = f"{endpoint.rstrip('/')}/v1/{secret}/versions/latest:access"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:  # noqa: S310
        body = json.loads(r.read())
    return base64.b64decode(base64.b64decode(body["payload"]["data"]))


def _token() -> str:
    request = urllib.request.Request(TOKEN_URL, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - the metadata server
        return json.loads(r.read())["access_token"]


def daemons(lay: conf.Layout, paths: Paths, rank: int) -> list[tuple[str, list[str]]]:
    """(name, argv) of each daemon this node runs, in start order, all in the foreground."""
    out: list[tuple[str, list[str]]] = []
    if lay.munge_socket:
        m = paths.munge_dir
        out.append(("munged", ["munged", "-F", "--force", f"--key-file={m / 'munge.key'}", f"--socket={lay.munge_socket}",
                               f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                               f"--seed-file={m / 'munge.seed'}"]))
    if rank == 0:
        out.append(("slurmctld", ["slurmctld", "-D", "-f", str(paths.conf)]))
    out.append(("slurmd", ["slurmd", "-D", "-N", paths.node, "-f", str(paths.conf)]))
    return out


def supervise(started: list[tuple[str, list[str]]], socket: str | None, say: callable) -> int:  # type: ignore[valid-type]
    """Start each daemon (slurm's once munged's socket is there) and wait; returns when one ends or on SIGTERM."""
    with contextlib.suppress(OSError, AttributeError):  # orphans (slurmstepd, job steps) become ours
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    procs: dict[int, tuple[str, subprocess.Popen]] = {}
    code = 0
    try:
        for name, argv in started:
            if name != "munged" and socket:
                _wait_for(Path(socket))
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            procs[popen.pid] = (name, popen)
            say(f"started {name} (pid {popen.pid})")
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid in procs:
                name, popen = procs.pop(pid)
                popen.returncode = os.waitstatus_to_exitcode(status)
                say(f"{name} exited with status {popen.returncode}: stopping the others")
                code = 1
                break
    except Going:
        say("the node is going: stopping the Slurm daemons")
    except ChildProcessError:
        code = 1
    finally:
        _stop([p for _n, p in procs.values()])
    return code


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + SOCKET_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"munged made no socket at {path} in {SOCKET_WAIT_S:g}s")
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        except ChildProcessError:  # reaped by the loop's waitpid already
            pass


def main(argv: list[str] | None = None) -> int:
    parser = service.parser("gcpgpu.slurm.node", "The Slurm daemons of one node of a gcpgpu cluster.")
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"where the files go (default {DEFAULT_DIR})")
    parser.add_argument("--run-dir", default=DEFAULT_RUN_DIR,
                        help=f"short-lived files, munged's socket among them (default {DEFAULT_RUN_DIR})")
    parser.add_argument("--state-dir", help=f"slurmctld's state (node 0; default DIR/{STATE_DIR}, where the startup "
                                            "script mounts the cluster's Slurm state disk)")
    parser.add_argument("--port-base", type=int, help="slurmctld's port; node r's slurmd gets base + 1 + r")
    args = service.add_emulator(parser).parse_args(argv)
    emulator = service.emulator_of(args)
    clients, say = service.start(args, "slurm", Going)
    nodes = [n for n in observe_nodes(clients, args.project, args.cluster) if n.rank is not None]
    me = next((n for n in nodes if n.name == args.node), None)
    if me is None or me.rank is None:
        say(f"node {args.node} is not a ranked node of cluster {args.cluster}")
        return 1
    secret = me.metadata.get(MUNGE_KEY)
    if not secret:
        say(f"metadata {MUNGE_KEY} is missing: not a Slurm cluster's node")
        return 1
    paths = Paths(Path(args.dir), args.node, Path(args.run_dir), Path(args.state_dir) if args.state_dir else None)
    lay = layout(args.cluster, nodes, me, paths, emulated=emulator is not None, port_base=args.port_base)
    endpoint = f"http://{emulator}" if emulator else SECRETMANAGER_URL
    key = munge_key(secret, endpoint, None if emulator else _token())
    try:
        write_files(lay, paths, key)
        say(f"rank {me.rank}: SLURM_CONF={paths.conf}")
        agent = None
        if me.rank == 0:  # beside slurmctld: hands queued jobs to sbatch, writes their states back
            # A round is a Compute list, a metadata read and one scontrol (~10 ms of CPU in the emulator,
            # where every job's submit, start, requeue and end waits for the next one).
            agent = QueueAgent(clients, args.project, args.cluster, paths.jobs, paths.conf,
                               emulator is not None, say, poll_s=0.25 if emulator else 5.0)
            threading.Thread(target=agent.run, name="slurm-queue-agent", daemon=True).start()
        try:
            return supervise(daemons(lay, paths, me.rank), lay.munge_socket, say)
        finally:
            if agent is not None:
                agent.stop.set()
    except Going:
        return 0
    finally:
        shutil.rmtree(paths.munge_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
