"""Shared file systems on `cluster up` (issue 41): every bad input is one line naming the field, exit 2,
and zero API calls; good input lands in the spec in canonical form."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT, refused

from gcpgpu.cli import main
from gcpgpu.cluster.spec import ClusterSpec
from gcpgpu.errors import UsageProblem
from gcpgpu.storage import tiers
from gcpgpu.storage.spec import parse_size, wanted

OK = ["c", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--region", "us-central1"]
BAD = [
    # a size outside the tier's range, or off its step
    ([*OK, "--filestore", "512GiB"], "--filestore 512 GiB is outside the filestore ZONAL tier: give 1 TiB to 9,984 GiB"),
    ([*OK, "--filestore", "1100GiB"], "in steps of 256 GiB"),
    ([*OK, "--filestore", "200TiB"], "--filestore 204,800 GiB is outside"),
    ([*OK, "--filestore", "50GiB", "--filestore-tier", "REGIONAL"], "filestore REGIONAL tier: give 100 GiB"),
    ([*OK, "--filestore", "1TiB", "--filestore-tier", "PLATINUM"], "--filestore-tier 'PLATINUM' must be one of ZONAL"),
    ([*OK, "--filestore", "lots"], "--filestore 'lots' is not a size"),
    ([*OK, "--lustre", "1TiB"], "--lustre 1,024 GiB is outside the lustre 1000 tier: give 9,000 GiB"),
    ([*OK, "--lustre", "9000GiB", "--lustre-tier", "500"], "lustre 500 tier: give 18,000 GiB"),
    ([*OK, "--lustre", "18000GiB", "--lustre-tier", "300"], "--lustre-tier '300' must be one of 1000, 500, 250, 125"),
    ([*OK, "--filestore-tier", "ZONAL"], "--filestore-tier needs --filestore SIZE"),
    # a zone the service does not offer (Managed Lustre's list: asia-northeast1-b and -c only)
    (["c", "--machine-type", "a3-highgpu-8g", "--zone", "asia-northeast1-a", "--lustre", "9000GiB"],
     "--zone asia-northeast1-a: lustre is not offered there; in asia-northeast1 it is offered in asia-northeast1-b"),
    (["c", "--machine-type", "a3-highgpu-8g", "--region", "asia-northeast1", "--lustre", "9000GiB"],
     "--lustre: no zone of asia-northeast1 that offers the machine type offers lustre"),
    # a reserved or duplicate mount point
    ([*OK, "--mount", "filestore:fs1:/etc"], "/etc is reserved"),
    ([*OK, "--mount", "filestore:fs1:/"], "/ is reserved"),
    ([*OK, "--mount", "filestore:fs1:/workdir/x"], "/workdir/x is reserved"),
    ([*OK, "--mount", "lustre:l1:scratch"], "must be an absolute path"),
    ([*OK, "--mount", "filestore:fs1:/a/../etc"], "'.', '..'"),
    ([*OK, "--filestore", "1TiB", "--mount", "filestore:other:/shared"], "mount point /shared is given twice"),
    ([*OK, "--mount", "lustre:a:/x", "--mount", "lustre:b:/x/"], "mount point /x is given twice"),
    ([*OK, "--mount", "nfs:fs1:/x"], "must be filestore:NAME:/PATH or lustre:NAME:/PATH"),
    ([*OK, "--mount", "filestore:Bad_Name:/x"], "must be an instance name"),
    # a --hyperdisk-ml source that is not gs://BUCKET/PREFIX
    ([*OK, "--hyperdisk-ml", "s3://bucket/data"], "--hyperdisk-ml 's3://bucket/data' must be a bucket path"),
    ([*OK, "--hyperdisk-ml", "gs://bucket"], "must be a bucket path gs://BUCKET/PREFIX"),
    ([*OK, "--hyperdisk-ml", "gs://Not_A_Bucket/x"], "must be a bucket path"),
    ([*OK, "--hyperdisk-ml", "gs://bucket/../x"], "must be a bucket path"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a[-2:]) for a, _ in BAD])
def test_bad_storage_input_is_one_line_exit_2_and_makes_no_api_call(gcp, monkeypatch, args, needle):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    assert needle in refused(gcp, "cluster", "up", *args, "--yes")


def test_sizes_tiers_and_mounts_land_in_the_spec_in_canonical_form():
    spec = ClusterSpec(name="c", machine_type="a3-highgpu-8g", nodes=2, filestore="2.5TiB", lustre=18000,
                       lustre_tier=500, mounts=["filestore:keep-me:/data/", "lustre:projects/proj-123/locations/"
                                                "us-central1-a/instances/lx:/ckpt"]).validate(default_region="us-central1")
    assert (spec.filestore, spec.filestore_tier, spec.lustre, spec.lustre_tier) == (2560, "ZONAL", 18000, "500")
    assert spec.mounts == ["filestore:keep-me:/data", "lustre:projects/proj-123/locations/us-central1-a/instances/lx:/ckpt"]
    assert [(w.kind, w.path, w.created) for w in wanted(spec)] == [
        ("filestore", "/shared", True), ("lustre", "/scratch", True), ("filestore", "/data", False),
        ("lustre", "/ckpt", False)]
    # Validating again (a recovery re-reads the spec from the nodes' metadata) changes nothing.
    again = ClusterSpec(**spec.to_dict()).validate()
    assert again.to_dict() == spec.to_dict()


def test_a_new_lustre_narrows_the_candidate_zones_to_those_that_offer_it():
    spec = ClusterSpec(name="c", machine_type="a2-highgpu-8g", nodes=2, region="asia-northeast1").validate()
    assert spec.zones == ["asia-northeast1-a", "asia-northeast1-c"]
    with_lustre = ClusterSpec(name="c", machine_type="a2-highgpu-8g", nodes=2, region="asia-northeast1",
                              lustre=9000).validate()
    assert with_lustre.zones == ["asia-northeast1-c"]


def test_a_spec_file_takes_the_same_keys(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: c\nmachine_type: a3-highgpu-8g\nregion: us-central1\nfilestore: 1TiB\n"
                 "filestore_tier: zonal\nmounts: lustre:old:/scratch\n")
    spec = ClusterSpec.from_sources(str(f), {}).validate()
    assert (spec.filestore, spec.filestore_tier, spec.mounts) == (1024, "ZONAL", ["lustre:old:/scratch"])
    f.write_text("name: c\nmachine_type: a3-highgpu-8g\nregion: us-central1\nfilestore: 10GiB\n")
    with pytest.raises(UsageProblem, match="--filestore 10 GiB is outside"):
        ClusterSpec.from_sources(str(f), {}).validate()


def test_every_tier_band_starts_on_its_step_and_the_sizes_parse_as_binary_units():
    for table in (tiers.FILESTORE, tiers.LUSTRE):
        for tier in table.values():
            assert tier.source
            for band in tier.bands:
                assert band.holds(band.low) and band.holds(band.high), (tier.name, band)
    assert parse_size("2.5TiB", "--x") == 2560 and parse_size("10T", "--x") == 10240 and parse_size(300, "--x") == 300


def test_cluster_plan_says_what_storage_up_will_make_and_what_it_attaches(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    result = CliRunner().invoke(main, ["cluster", "plan", *OK, "--filestore", "1TiB", "--mount", "lustre:old:/scratch"])
    assert result.exit_code == 0, result.output
    assert "note: filestore 1,024 GiB (ZONAL) at /shared on every node" in result.output
    assert "note: lustre old attached at /scratch on every node (never deleted)" in result.output
