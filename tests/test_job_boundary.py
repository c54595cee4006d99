"""The security boundary a user's job runs inside, measured from inside the job (README, "Security").

A user's command, sandboxed on the emulator, shares the machine's network with the emulator, which answered
it as it answers the laptop: every cluster's munge key and every job's secret were one tokenless GET away,
and so was every other API. Now a job reads its own `--secret`s (with the token the emulator gives it for
them) and nothing else: no other secret, no munge key (the key that lets a process speak for any cluster's
Slurm), no Compute, no control endpoint.
"""

from __future__ import annotations

import base64
import json
import shutil
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: the emulator cannot sandbox users' commands")

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
IMAGE = "us-docker.pkg.dev/p/r/mine:1"

PROBE = '''
import json, os, urllib.error, urllib.request

url = os.environ["GCPGPU_SECRETMANAGER_URL"]
token = os.environ.get("GCPGPU_SECRETMANAGER_TOKEN", "")

def call(path, auth=True, method="GET"):
    headers = {"Authorization": "Bearer " + token} if auth else {}
    headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url + path, headers=headers, method=method, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code

secrets = "/v1/projects/test-proj/secrets/"
print("PROBE " + json.dumps({
    "own": call(secrets + "mine/versions/latest:access"),
    "own_env": os.environ.get("MINE") == "m1ne",
    "other": call(secrets + "theirs/versions/latest:access"),
    "other_anon": call(secrets + "theirs/versions/latest:access", auth=False),
    "munge": call(secrets + "gcpgpu-munge-other/versions/latest:access"),
    "munge_anon": call(secrets + "gcpgpu-munge-other/versions/latest:access", auth=False),
    "list": call("/v1/projects/test-proj/secrets", auth=False),
    "compute": call("/compute/v1/projects/test-proj/zones/us-central1-a/instances", auth=False),
    "control": call("/_emulator/reset", auth=False, method="POST"),
}))
'''


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


def put_secret(gcp, name: str, value: bytes) -> str:
    def call(path: str, body: dict) -> None:
        req = urllib.request.Request(f"{gcp.url}/v1/{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).close()  # noqa: S310 - the emulator on loopback

    call(f"projects/test-proj/secrets?secretId={name}", {"replication": {"automatic": {}}})
    call(f"projects/test-proj/secrets/{name}:addVersion", {"payload": {"data": base64.b64encode(value).decode()}})
    return f"projects/test-proj/secrets/{name}/versions/latest"


@needs_bwrap
def test_a_job_reads_its_own_secret_and_no_munge_key_other_secret_or_other_api(gcp, tmp_path: Path):
    mine = put_secret(gcp, "mine", b"m1ne")
    put_secret(gcp, "theirs", b"th31rs")  # another job's
    put_secret(gcp, "gcpgpu-munge-other", b"k3y")  # another Slurm cluster's munge key, as `cluster up` makes it
    src = tmp_path / "code"
    src.mkdir()
    (src / "probe.py").write_text(PROBE)
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait", "--image", IMAGE,
                 "--workdir", str(src), "--secret", f"MINE={mine}", "--command", "python probe.py")
    logs = cli("job", "logs", result.stdout.splitlines()[0]).output
    assert result.exit_code == 0, result.output + logs
    said = json.loads(next(line for line in logs.splitlines() if "PROBE " in line).split("PROBE ", 1)[1])
    assert said == {"own": 200, "own_env": True, "other": 403, "other_anon": 403, "munge": 403, "munge_anon": 403,
                    "list": 403, "compute": 403, "control": 403}
    assert "th31rs" not in logs and "k3y" not in logs
    # The laptop (this process: no sandbox) is answered as before, and the emulator was not reset.
    with urllib.request.urlopen(f"{gcp.url}/v1/projects/test-proj/secrets/theirs/versions/latest:access",
                                timeout=10) as r:  # noqa: S310
        assert base64.b64decode(json.loads(r.read())["payload"]["data"]) == b"th31rs"
