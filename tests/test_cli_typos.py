"""Issue 51: a cluster name one edit from an existing cluster's gets "did you mean", and nothing matched exits 1.

`cluster status tema` and `job submit --cluster tema` exited 1 with no suggestion; `job list --cluster tema`
and `cluster down tema --yes` exited 0 ("No jobs", "nothing to delete"); `job cancel cluster:tema:x` said
"its job x went with it" of a job that never was.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.cluster.unknown import nearest, one_edit

PROJECT = "test-proj"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, "--region", "us-central1", *argv])


@pytest.mark.parametrize(("a", "b", "close"), [
    ("tema", "team", True), ("tem", "team", True), ("teams", "team", True), ("tean", "team", True),
    ("team", "team", False), ("mate", "team", False), ("t", "team", False), ("", "a", True), ("ab", "ba", True),
])
def test_one_edit_is_one_insert_delete_replace_or_swap(a, b, close):
    assert one_edit(a, b) is close and one_edit(b, a) is close


def test_nearest_lists_every_close_name_sorted():
    assert nearest("tema", ["team", "tea", "temp", "other"]) == ["tea", "team", "temp"]


@pytest.mark.parametrize("argv", [
    ("cluster", "status", "tema"),
    ("job", "submit", "--cluster", "tema", "--image", "busybox", "--command", "true"),
    ("job", "list", "--cluster", "tema"),
    ("job", "cancel", "cluster:tema:x"),
    ("job", "status", "cluster:tema:x"),
], ids=lambda a: " ".join(a[:2]))
def test_a_typo_of_a_cluster_name_exits_1_and_says_did_you_mean(gcp, argv):
    assert cli("cluster", "up", "team", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    got = cli(*argv)
    assert got.exit_code == 1, got.output
    assert "did you mean team?" in got.output and "went with it" not in got.output, got.output
    assert len([line for line in got.output.splitlines() if line.startswith("Error:")]) == 1, got.output


def test_down_of_a_typo_exits_1_with_did_you_mean_and_of_a_name_near_nothing_stays_idempotent(gcp):
    """`cluster down` of nothing exits 0 (a second `down`, one after a Ctrl-C, must be fine, as terraform
    destroy), but a name one edit from an existing cluster's is a probable typo: exit 1, the name it was likely
    meant to be, and nothing deleted."""
    assert cli("cluster", "up", "team", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    got = cli("cluster", "down", "tema", "--yes")
    assert got.exit_code == 1, got.output
    errors = [line for line in got.output.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: no cluster named tema in project test-proj: nothing was deleted; did you mean team? "
                      "(see 'gcpgpu cluster list')"], got.output
    assert "RUNNING" in cli("cluster", "status", "team").output  # the near one is untouched
    far = cli("cluster", "down", "production", "--yes")
    assert far.exit_code == 0 and "nothing to delete" in far.output and "did you mean" not in far.output, far.output
    assert cli("cluster", "down", "team", "--yes").exit_code == 0
    assert cli("cluster", "down", "team", "--yes").exit_code == 0  # a second down of the same: fine


def test_a_name_close_to_nothing_gets_no_suggestion_and_a_cluster_with_no_job_lists_none(gcp):
    assert cli("cluster", "up", "team", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    far = cli("cluster", "status", "production")
    assert far.exit_code == 1 and "no cluster named production" in far.output and "did you mean" not in far.output
    empty = cli("job", "list", "--cluster", "team")
    assert empty.exit_code == 0 and "No jobs in project test-proj on cluster team." in empty.output


def test_no_credentials_says_how_to_get_them_or_to_use_the_emulator(monkeypatch, tmp_path):
    """Issue 51: the README's conventions block pasted before the emulator section ended in google-auth's ADC
    error, with no word of the emulator; now the one line says both ways on."""
    monkeypatch.delenv("GCPGPU_EMULATOR", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setattr("google.auth._cloud_sdk.get_application_default_credentials_path",
                        lambda: str(tmp_path / "none.json"))
    monkeypatch.setattr("google.auth.compute_engine._metadata.is_on_gce", lambda *a, **k: False)
    got = CliRunner().invoke(main, ["--project", "my-project", "cluster", "list"])
    assert got.exit_code == 1, got.output
    (error,) = [line for line in got.output.splitlines() if line.startswith("Error:")]
    assert "gcloud auth application-default login" in error and "GCPGPU_EMULATOR" in error, got.output
