"""gcloud secrets against the emulator, through `eval "$(gcpgpu emulator gcloud-env)"` (its
api_endpoint_overrides/secretmanager), as a user would store the token a job's --secret names."""

from __future__ import annotations

import shutil

import pytest


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_creates_a_secret_and_reads_its_latest_version(gcloud, gcp):
    rc, _out, err = gcloud("printf 's3cret-value' | gcloud secrets create hf-token --data-file=- "
                           "--replication-policy=automatic")
    assert rc == 0, err
    rc, out, err = gcloud("gcloud secrets versions access latest --secret hf-token")
    assert rc == 0, err
    assert out == "s3cret-value"
    rc, _out, err = gcloud("gcloud secrets versions access latest --secret no-such-secret")
    assert rc != 0 and "NOT_FOUND" in err
