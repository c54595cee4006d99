"""Who may read a Slurm cluster's munge key on Google Cloud: with the cluster's own --service-account, that
account is bound to the key's secret itself (secrets.setIamPolicy), so no project-wide Secret Manager role is
needed and another cluster's account, given none, reads nothing of it (README, "Security")."""

from __future__ import annotations

from gcpgpu.cluster import munge
from gcpgpu.gcp.clients import Clients

PROJECT = "test-proj"


def test_the_clusters_own_service_account_alone_is_bound_to_its_munge_key(gcp):
    clients = Clients(emulator=gcp.address)
    sa = "gcpgpu-a@test-proj.iam.gserviceaccount.com"
    assert munge.ensure_key(clients, PROJECT, "a", sa)
    assert gcp.secretmanager.get_iam_policy(PROJECT, "gcpgpu-munge-a")["bindings"] == [
        {"role": "roles/secretmanager.secretAccessor", "members": [f"serviceAccount:{sa}"]}]
    # An `up` again with another account (the cluster made again) moves the access; the key stays the same.
    key = gcp.secretmanager.access_version(PROJECT, "gcpgpu-munge-a", "latest")
    assert not munge.ensure_key(clients, PROJECT, "a", "other@test-proj.iam.gserviceaccount.com")
    assert gcp.secretmanager.get_iam_policy(PROJECT, "gcpgpu-munge-a")["bindings"][0]["members"] == [
        "serviceAccount:other@test-proj.iam.gserviceaccount.com"]
    assert gcp.secretmanager.access_version(PROJECT, "gcpgpu-munge-a", "latest") == key


def test_nodes_on_the_default_service_account_leave_the_keys_policy_alone(gcp):
    clients = Clients(emulator=gcp.address)
    assert munge.ensure_key(clients, PROJECT, "b", None)
    assert munge.ensure_key(clients, PROJECT, "c", "default") is True
    assert "bindings" not in gcp.secretmanager.get_iam_policy(PROJECT, "gcpgpu-munge-b")
