"""Who made what: every job and cluster record carries the Google identity of the credentials that made it.

On the emulator the caller is GCPGPU_EMULATOR_USER, so a test acts as two people (alice and bob); on Google
Cloud it is read from the credentials as Google's client libraries expose them (checked here against a
stand-in for Google's tokeninfo endpoint).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner
from helpers import PROJECT, refused, wait_for

from gcpgpu.cli import main
from gcpgpu.gcp import identity

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
ALICE, BOB = "alice@example.com", "bob@example.com"


def as_(monkeypatch, who: str):
    def run(*argv: str, fmt: str | None = None):
        monkeypatch.setenv(identity.USER_ENV, who)
        return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])
    return run


def test_two_people_see_who_made_each_cluster_and_job_and_one_cannot_cancel_the_other_s_by_accident(gcp, monkeypatch):
    alice, bob = as_(monkeypatch, ALICE), as_(monkeypatch, BOB)
    assert alice("cluster", "up", "team", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone",
                 "us-central1-a", "--yes").exit_code == 0
    # bob re-runs up: the cluster stays alice's
    assert bob("cluster", "up", "team", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone",
               "us-central1-a", "--yes").exit_code == 0
    rows = json.loads(bob("cluster", "list", fmt="json").stdout)
    assert [(r["cluster"], r["owner"]) for r in rows] == [("team", ALICE)]
    assert "MADE BY" in bob("cluster", "list").stdout
    assert json.loads(bob("cluster", "list", "--mine", fmt="json").stdout) == []
    assert [r["cluster"] for r in json.loads(bob("cluster", "list", "--user", ALICE, fmt="json").stdout)] == ["team"]

    submitted = alice("job", "submit", "--cluster", "team", "--image", "busybox", "--command", "sleep 600")
    assert submitted.exit_code == 0, submitted.output
    jid = submitted.stdout.splitlines()[0]
    wait_for(lambda: json.loads(alice("job", "status", jid, fmt="json").stdout)["state"] == "RUNNING",
             timeout=120, what="alice's job running")
    assert json.loads(bob("job", "status", jid, fmt="json").stdout)["submitter"] == ALICE
    listed = json.loads(bob("job", "list", "--clusters", fmt="json").stdout)
    assert [(r["id"], r["submitter"]) for r in listed] == [(jid, ALICE)]
    assert json.loads(bob("job", "list", "--clusters", "--mine", fmt="json").stdout) == []
    assert "No jobs in project test-proj submitted by bob@example.com." in bob("job", "list", "--clusters", "--mine").output

    # bob's cancel of alice's job: one line that names her and what to do, and the job runs on.
    refused_cancel = bob("job", "cancel", jid)
    assert refused_cancel.exit_code == 2
    line = refused_cancel.output.strip()
    assert "\n" not in line and f"submitted by {ALICE}, not by you ({BOB})" in line and "--force" in line, line
    assert json.loads(alice("job", "status", jid, fmt="json").stdout)["state"] == "RUNNING"
    # alice cancels her own without --force; so could bob with it.
    assert alice("job", "cancel", jid, "--wait").exit_code == 0
    assert json.loads(alice("job", "status", jid, fmt="json").stdout)["state"] == "CANCELLED"
    assert bob("cluster", "down", "team", "--yes").exit_code == 0


def test_a_vertex_job_keeps_its_submitter_and_an_old_record_reads_unknown(gcp, monkeypatch):
    bob = as_(monkeypatch, BOB)
    submitted = bob("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--image", "busybox")
    assert submitted.exit_code == 0, submitted.output
    jid = submitted.stdout.splitlines()[0]
    assert json.loads(bob("job", "status", jid, fmt="json").stdout)["submitter"] == BOB
    rows = json.loads(bob("job", "list", "--vertex", "--user", BOB, fmt="json").stdout)
    assert [r["id"] for r in rows] == [jid]
    # A job made before gcpgpu kept who made it (no submitter in its record) reads "unknown", and anyone may
    # cancel it as before.
    from gcpgpu.jobs.cluster.record import JobRecord
    from gcpgpu.jobs.cluster.view import from_record
    from gcpgpu.jobs.ids import JobId

    old = JobRecord.from_json({"id": "train-abc123", "name": "train", "state": "SUCCEEDED"})
    assert from_record(JobId("cluster", cluster="c", job="train-abc123"), old).to_dict()["submitter"] == "unknown"


@pytest.mark.parametrize(("argv", "said"), [
    (["job", "list", "--mine", "--user", ALICE], "--mine and --user exclude each other"),
    (["job", "list", "--user", "alice"], "--user 'alice' must be an e-mail address"),
    (["cluster", "list", "--user", "bob@"], "--user 'bob@' must be an e-mail address"),
])
def test_a_bad_user_filter_is_one_line_before_any_call(gcp, argv, said):
    assert said in refused(gcp, *GLOBAL, *argv)


class _TokenInfo:
    """Google's tokeninfo endpoint for one token: its e-mail."""

    def __init__(self, token: str, email: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                ok = self.path.endswith(f"access_token={token}")
                body = json.dumps({"email": email, "email_verified": "true"} if ok else {"error": "invalid_token"})
                self.send_response(200 if ok else 400)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/tokeninfo"


class _Credentials:
    def __init__(self, token: str, service_account_email: str | None = None) -> None:
        self.token = token
        if service_account_email is not None:
            self.service_account_email = service_account_email

    def refresh(self, request) -> None:
        return


def test_on_google_a_person_is_named_by_tokeninfo_and_a_service_account_by_its_credentials(monkeypatch):
    import google.auth

    info = _TokenInfo("ya29.alice", ALICE)
    monkeypatch.setattr(identity, "TOKENINFO", info.url)
    try:
        monkeypatch.setattr(google.auth, "default", lambda scopes=None: (_Credentials("ya29.alice"), "p"))
        assert identity._google() == ALICE
        robot = "trainer@p.iam.gserviceaccount.com"
        monkeypatch.setattr(google.auth, "default", lambda scopes=None: (_Credentials("t", robot), "p"))
        assert identity._google() == robot
        # A token tokeninfo does not know, or no credentials at all: unknown, never a failure.
        monkeypatch.setattr(google.auth, "default", lambda scopes=None: (_Credentials("ya29.other"), "p"))
        assert identity._google() == identity.UNKNOWN

        def none(scopes=None):
            raise google.auth.exceptions.DefaultCredentialsError("no credentials")
        monkeypatch.setattr(google.auth, "default", none)
        assert identity._google() == identity.UNKNOWN
    finally:
        info.server.shutdown()
