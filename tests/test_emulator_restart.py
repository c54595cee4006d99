"""An emulator restarted on its --state-file tells the story its restart made: what it kept (Secret Manager's
secrets, a Slurm cluster's munge key among them, written where only its owner reads them) and what died with
its old process (every job's processes: their nodes are lost to a host error, so a job reads FAILED with that
cause, or is recovered, and never RUNNING for ever)."""

from __future__ import annotations

import base64
import json
import stat
import urllib.request
from pathlib import Path

from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main
from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs.cluster.loss import loss_causes

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def _status(jid: str) -> dict:
    got = cli("job", "status", jid, fmt="json")
    assert got.exit_code in (0, 1), got.output
    return json.loads(got.stdout)


def test_secrets_come_back_after_a_restart_in_a_file_only_its_owner_reads(tmp_path: Path):
    state = tmp_path / "emu.json"
    with Emulator(state_file=state) as first:
        first.secretmanager.create_secret("test-proj", "gcpgpu-munge-c", {"replication": {"automatic": {}}})
        first.secretmanager.add_version("test-proj", "gcpgpu-munge-c", {"data": base64.b64encode(b"k3y").decode()})
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    with Emulator(state_file=state) as second, urllib.request.urlopen(  # noqa: S310 - the emulator on loopback
            f"{second.url}/v1/projects/test-proj/secrets/gcpgpu-munge-c/versions/latest:access", timeout=10) as r:
        assert base64.b64decode(json.loads(r.read())["payload"]["data"]) == b"k3y"


def test_a_job_running_when_the_emulator_stopped_is_lost_to_a_host_error_not_running_for_ever(tmp_path, monkeypatch):
    state = tmp_path / "emu.json"
    with Emulator(state_file=state) as first:
        monkeypatch.setenv("GCPGPU_EMULATOR", first.address)
        first.faults.update({"operation_seconds": 0})
        first.jobs.agent.simulated_run_s = 3600.0  # still running when the emulator stops
        assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
                   "--yes").exit_code == 0
        submitted = cli("job", "submit", "--cluster", "c", "--image", "us-docker.pkg.dev/p/r/mine:1")
        assert submitted.exit_code == 0, submitted.output
        jid = submitted.stdout.splitlines()[0]
        wait_for(lambda: _status(jid)["state"] == "RUNNING", timeout=60, what="the job running")
    with Emulator(state_file=state) as second:
        monkeypatch.setenv("GCPGPU_EMULATOR", second.address)
        final = wait_for(lambda: (s := _status(jid))["state"] not in ("RUNNING", "PENDING") and s, timeout=60,
                         what="the job's record to converge after the restart")
        assert final["state"] == "FAILED", final
        assert "lost while the job ran" in final["error"]
        assert {row["node_status"] for row in final["per_node"]} == {"TERMINATED"}
        # Compute says why, as for any host error: what the follower reads to recover the job (--recover).
        causes = loss_causes(Clients(emulator=second.address), "test-proj", "c", final["per_node"])
        assert causes == {"c-0": "host error", "c-1": "host error"}
