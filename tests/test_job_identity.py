"""A job's own identity on Google Cloud: the metadata server a job's container sees with --job-service-account.

The node's metadata server would hand a job's container the node's token (and with it a Slurm cluster's munge
key). gcpgpu/node/jobmeta.py stands in for it: run here as the startup script runs it (the host's python3, the
file alone, standard library only) between a stand-in for the node's metadata server and one for IAM
Credentials, and read by Google's own auth library as a job's code would read it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gcpgpu.node import jobmeta

NODE_TOKEN = "ya29.node-account-token"
JOB = "trainer@test-proj.iam.gserviceaccount.com"


class Google:
    """The node's metadata server and IAM Credentials in one: what the job metadata server asked of each."""

    def __init__(self, iam_status: int = 200) -> None:
        self.iam_status = iam_status
        self.minted: list[dict] = []
        self.asked: list[str] = []
        google = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                google.asked.append(self.path)
                values = {"/md/instance/service-accounts/default/token":
                          json.dumps({"access_token": NODE_TOKEN, "expires_in": 3599}).encode(),
                          "/md/instance/machine-type": b"projects/1/machineTypes/a3-ultragpu-8g",
                          "/md/instance/attributes/gcpgpu-cluster": b"team"}
                self._send(200, values[self.path]) if self.path in values else self._send(404, b"no")

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                google.minted.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                n = len(google.minted)
                answer = {"accessToken": f"ya29.job-token-{n}", "expireTime": "2026-12-08T00:00:00Z"}
                self._send(google.iam_status, json.dumps(answer if google.iam_status == 200 else
                                                       {"error": {"code": google.iam_status}}).encode())

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(request):
    """(the job metadata server's address, the Google stand-in) for a server started as the node starts it."""
    def start(iam_status: int = 200):
        google = Google(iam_status)
        request.addfinalizer(google.close)
        # The host's python3 runs the file alone, isolated (-I): nothing of gcpgpu or Google's libraries.
        proc = subprocess.Popen(
            [sys.executable, "-I", str(Path(jobmeta.__file__)), "--job-service-account", JOB, "--port", "0",
             "--upstream", f"{google.base}/md", "--iam", google.base + "/v1/projects/-/serviceAccounts/{}:generateAccessToken"],
            stdout=subprocess.PIPE, text=True)
        request.addfinalizer(lambda: (proc.kill(), proc.wait()))
        line = proc.stdout.readline()
        assert "serving" in line, line
        return line.rsplit(":", 1)[1].strip(), google
    return start


def _get(port: str, path: str, headers: dict | None = None, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Metadata-Flavor": "Google"} if headers is None else headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_job_gets_its_own_account_s_token_minted_by_the_node_s_account_and_never_the_node_s(served):
    port, google = served()
    status, body = _get(port, "/computeMetadata/v1/instance/service-accounts/default/token")
    assert status == 200, body
    assert json.loads(body)["access_token"] == "ya29.job-token-1"
    assert NODE_TOKEN not in body
    # Minted by IAM Credentials for the job's account, with the node's token, for the cloud-platform scope.
    assert google.minted == [{"path": f"/v1/projects/-/serviceAccounts/{JOB}:generateAccessToken",
                              "auth": f"Bearer {NODE_TOKEN}",
                              "body": {"scope": [jobmeta.SCOPE], "lifetime": "3600s"}}]
    # A second ask within the token's life reuses it.
    assert json.loads(_get(port, "/computeMetadata/v1/instance/service-accounts/default/token")[1])["access_token"] \
        == "ya29.job-token-1"
    assert len(google.minted) == 1
    assert _get(port, "/computeMetadata/v1/instance/service-accounts/default/email") == (200, JOB)
    # The account's own e-mail names it too; another account's token is not this job's to have.
    assert _get(port, f"/computeMetadata/v1/instance/service-accounts/{JOB}/token")[0] == 200
    status, body = _get(port, "/computeMetadata/v1/instance/service-accounts/node@p.iam.gserviceaccount.com/token")
    assert status == 403 and NODE_TOKEN not in body


def test_google_s_auth_library_in_a_job_reads_the_job_s_account_from_it(served):
    port, _ = served()
    env = {**os.environ, "GCE_METADATA_HOST": f"127.0.0.1:{port}", "GCE_METADATA_IP": f"127.0.0.1:{port}",
           "NO_GCE_CHECK": "False"}
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    code = ("import google.auth, google.auth.transport.requests as t\n"
            "creds, _ = google.auth.default(scopes=['https://www.googleapis.com/auth/cloud-platform'])\n"
            "creds.refresh(t.Request())\n"
            "print(type(creds).__module__, creds.service_account_email, creds.token)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["google.auth.compute_engine.credentials", JOB, "ya29.job-token-1"]


def test_it_passes_what_a_job_needs_to_find_itself_and_refuses_the_rest(served):
    port, google = served()
    assert _get(port, "/computeMetadata/v1/instance/machine-type") == (200, "projects/1/machineTypes/a3-ultragpu-8g")
    assert _get(port, "/computeMetadata/v1/instance/attributes/gcpgpu-cluster") == (200, "team")
    for path in ("/computeMetadata/v1/project/attributes/ssh-keys", "/computeMetadata/v1/instance/attributes/ssh-keys",
                 "/computeMetadata/v1/instance/attributes/startup-script",
                 "/computeMetadata/v1/instance/service-accounts/default/identity?audience=x",
                 "/computeMetadata/v1/instance/?recursive=true", "/computeMetadata/v1/project/attributes/gcpgpu-jobs"):
        status, body = _get(port, path)
        assert status == 403, (path, status, body)
    asked = set(google.asked)
    assert not any("ssh-keys" in p or "startup-script" in p or "project/attributes" in p for p in asked), asked
    # As the real server asks: the header, and no proxy's X-Forwarded-For; nothing is written through it.
    assert _get(port, "/computeMetadata/v1/instance/machine-type", headers={})[0] == 403
    assert _get(port, "/computeMetadata/v1/instance/machine-type",
                headers={"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.2"})[0] == 403
    assert _get(port, "/computeMetadata/v1/instance/guest-attributes/gcpgpu/state", method="PUT")[0] == 403


def test_a_node_account_without_token_creator_on_the_job_account_is_told_what_to_grant(served):
    port, _ = served(iam_status=403)
    status, body = _get(port, "/computeMetadata/v1/instance/service-accounts/default/token")
    assert status == 403
    assert f"roles/iam.serviceAccountTokenCreator on {JOB}" in body
    assert NODE_TOKEN not in body


# --- the node's side: the startup script runs it and fences the metadata server; the job agent joins the fence ---

def _plan(job_account: str | None, machine_type: str = "a3-ultragpu-8g"):
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec
    from tests.test_node_scripts import ZONE

    spec = ClusterSpec(name="c", machine_type=machine_type, nodes=2, zones=[ZONE[machine_type]],
                       service_account="nodes@test-proj.iam.gserviceaccount.com",
                       job_service_account=job_account).validate()
    return {i["key"]: i["value"] for i in plan(spec, "test-proj").instance_properties["metadata"]["items"]}


@pytest.mark.parametrize("machine_type", ["a3-ultragpu-8g", "a2-highgpu-1g"])
def test_the_startup_script_writes_the_server_as_it_is_and_fences_job_containers_off(tmp_path, machine_type):
    from tests.test_node_scripts import ZONE, lint

    ZONE.setdefault("a2-highgpu-1g", "us-central1-a")
    items = _plan(JOB, machine_type)
    assert items["gcpgpu-job-service-account"] == JOB
    text = items["startup-script"]
    lint(tmp_path, text)
    written = text.split("<<'GCPGPU_JOBMETA'\n", 1)[1].split("\nGCPGPU_JOBMETA\n", 1)[0]
    assert written + "\n" == Path(jobmeta.__file__).read_text()  # the file itself, run by the host's python3
    assert f"ExecStart=/usr/bin/python3 -I /usr/local/lib/gcpgpu/jobmeta.py --job-service-account {JOB}" in text
    rule = f"-d 169.254.169.254/32 -m cgroup --path {jobmeta.SLICE} -j REJECT"
    assert f"iptables -C OUTPUT {rule}" in text and f"iptables -I OUTPUT 1 {rule}" in text
    # Without a job account nothing of it: jobs keep today's node identity (README says so).
    plain = _plan(None, machine_type)
    assert "gcpgpu-job-service-account" not in plain and "GCPGPU_JOBMETA" not in plain["startup-script"]


@pytest.fixture
def md():
    """A node's metadata server (tests/test_node_scripts.py's), recording the job agent's guest attributes."""
    from tests.test_node_scripts import Metadata

    server = Metadata()
    yield server
    server.server.shutdown()


def _agent_run(tmp_path: Path, metadata, fenced: bool | None):
    from tests.test_node_scripts import agent_script, docker_calls, stubs

    env = stubs(tmp_path, metadata)
    if fenced is not None:
        metadata.values["gcpgpu-job-service-account"] = JOB
        iptables = tmp_path / "bin" / "iptables"
        iptables.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/iptables.log\nexit {0 if fenced else 1}\n")
        iptables.chmod(0o755)
    script = tmp_path / "agent.sh"
    script.write_text(agent_script(None))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    runs = [c for c in docker_calls(tmp_path) if c[0] == "run"]
    return done, runs


def test_the_job_agent_puts_the_container_behind_the_fence_and_points_it_at_the_job_s_server(tmp_path, md):
    done, runs = _agent_run(tmp_path, md, fenced=True)
    assert done.returncode == 0, done.stderr
    (job,) = runs
    assert job[job.index("--cgroup-parent") + 1] == jobmeta.SLICE
    assert f"GCE_METADATA_HOST={jobmeta.ADDRESS}" in job and f"GCE_METADATA_IP={jobmeta.ADDRESS}" in job
    assert f"GCPGPU_METADATA_URL=http://{jobmeta.ADDRESS}/computeMetadata/v1" in job
    assert (tmp_path / "iptables.log").read_text().split() == \
        ["-C", "OUTPUT", "-d", "169.254.169.254/32", "-m", "cgroup", "--path", jobmeta.SLICE, "-j", "REJECT"]


def test_a_job_does_not_start_where_the_fence_is_not_in_force(tmp_path, md):
    done, runs = _agent_run(tmp_path, md, fenced=False)
    assert done.returncode == 1 and runs == []
    assert md.guest["gcpgpu/state"] == "FAILED"
    assert md.guest["gcpgpu/message"] == \
        f"jobs here run as {JOB}, but this node does not fence the metadata server off from them"


def test_a_cluster_without_a_job_account_runs_jobs_as_before(tmp_path, md):
    done, runs = _agent_run(tmp_path, md, fenced=None)
    assert done.returncode == 0 and "--cgroup-parent" not in runs[0] and not any("GCE_METADATA" in a for a in runs[0])


@pytest.mark.parametrize(("flags", "said"), [
    (["--job-service-account", "trainer"], "--job-service-account 'trainer' must be a service account's e-mail"),
    (["--service-account", JOB, "--job-service-account", JOB],
     "--job-service-account must not be the nodes' --service-account"),
])
def test_a_bad_job_account_is_one_line_before_any_call(gcp, flags, said):
    from tests.helpers import refused

    line = refused(gcp, "--project", "test-proj", "cluster", "up", "c", "--machine-type", "a2-highgpu-1g",
                   "--nodes", "1", "--region", "us-central1", "--yes", *flags)
    assert said in line, line
