"""The container engine of emulated Slurm nodes: what `docker run` is to a real Slurm node's task.

On Google Cloud, gcpgpu's Slurm task (gcpgpu/slurm/task.py) runs the job's container on its node as the
node's job agent runs it (templates/job_agent.sh.j2). Here every node's "Docker" is the emulator's job
agent (agent.py): the task runs `python -m gcpgpu.fakes.engine_call SOCKET CALL.json` (the command
GCPGPU_SLURM_ENGINE names; guest/slurm.py sets it, from Engine.env, for the nodes' daemons and sbatch
hands it on to the tasks), which passes the call (the job record as that attempt runs it, the node, its
rank and the node count of Slurm's allocation) over a unix socket to this emulator. The agent then runs
the node's process exactly as for a job put in the node's metadata: the bundled trainer with its output
folders mapped to the emulator's storage, or a user's command through the image's entrypoint in the
sandbox (workdir, setup, mounts, secrets). Its output goes to Cloud Logging as the job's container's, so
`job logs` reads it.

The client stays attached while the process runs and exits with its exit code, as `docker run` does. A
SIGTERM to it (scancel, a preemption by a higher priority) stops the process (SIGTERM, then SIGKILL
after the runner's grace) and it exits once the process has; a client that ends without asking (a
SIGKILL, its node lost) stops it too. The socket lives in a mode-700 folder of this emulator's.
"""

from __future__ import annotations

import atexit
import json
import shlex
import shutil
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend
    from .agent import ClusterAgent

ENGINE_ENV = "GCPGPU_SLURM_ENGINE"  # gcpgpu/slurm/task.py reads it
POLL_S = 0.2


CLIENT = "gcpgpu.fakes.engine_call"  # outside this package: a task's start imports none of the job emulator


class Engine:
    """Serves the Slurm tasks' calls of one emulator."""

    def __init__(self, compute: ComputeBackend, agent: ClusterAgent) -> None:
        self.compute = compute
        self.agent = agent
        self._server: socket.socket | None = None  # made when the first Slurm node starts
        self._lock = threading.Lock()

    def command(self) -> str:
        """What a task runs, followed by its call file (GCPGPU_SLURM_ENGINE)."""
        return shlex.join([sys.executable, "-m", CLIENT, str(self._serving())])

    def env(self) -> dict[str, str]:
        """What the Slurm daemons' environment adds so that sbatch hands their tasks this engine."""
        return {ENGINE_ENV: self.command()}

    def _serving(self) -> Path:
        with self._lock:
            if self._server is None:
                folder = Path(tempfile.mkdtemp(prefix="gcpgpu-engine-"))  # short: a socket path is < 108 bytes
                atexit.register(shutil.rmtree, folder, True)
                self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._server.bind(str(folder / "engine.sock"))
                self._server.listen(64)
                threading.Thread(target=self._accept, args=(self._server,), name="emulator-slurm-engine",
                                 daemon=True).start()
            return Path(self._server.getsockname())

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="emulator-slurm-task", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                code = self._run(conn)
            except Exception as e:  # the call or the node was not what it should be: the task fails, saying why
                code = {"exit": 1, "error": f"{type(e).__name__}: {e}"}
            if code is not None:
                try:
                    conn.sendall(json.dumps(code).encode() + b"\n")
                except OSError:
                    pass

    def _run(self, conn: socket.socket) -> dict | None:
        reader = conn.makefile("rb")
        call = json.loads(reader.readline())
        project, node, job = str(call["project"]), str(call["node"]), dict(call["job"])
        found = next((i for i in self.compute.instance_summaries(project)
                      if i["name"] == node and i["status"] == "RUNNING"), None)
        if found is None:
            return {"exit": 1, "error": f"node {node} is not a RUNNING instance of project {project}"}
        inst = self.compute.get(project, f"zones/{found['zone']}/instances", node)
        job_id = str(job.get("run") or job["id"])
        run_id = self.agent.run_job(project, found["zone"], inst, job, job_id, int(call["rank"]), int(call["nnodes"]))
        conn.settimeout(POLL_S)
        while True:
            code = self.agent.exit_code(found["id"], job_id)
            if code is not None:
                return {"exit": code}
            try:
                asked = conn.recv(64)
            except TimeoutError:
                continue
            self.agent.stop(found["id"], run_id)  # "stop" (a SIGTERM to the task), or the task is gone
            if not asked:
                return None
