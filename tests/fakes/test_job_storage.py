"""The emulator's storage for job outputs (buckets and node disks) never reaches outside its root."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcpgpu.fakes.jobs.storage import Storage

# (what a job names, the folder of ROOT it must stay in: the buckets, or that node's own disk).
# Each climbs no further than this test's tmp_path if the emulator ever resolves it as a host path
# again, so a regression is caught without touching anything outside the test's folder.
HOSTILE = [("gs://bucket/../../x", "gcs"), ("gs://../../x/", "gcs"), ("gs://b/./..//../x", "gcs"),
           ("/gcs/b/../../x", "gcs"), ("{tmp}/w/../x", "nodes/4711"), ("../../x", "nodes/4711"),
           ("y/../../../x", "nodes/4711")]


@pytest.mark.parametrize(("value", "inside"), HOSTILE)
def test_a_path_that_climbs_stays_inside_its_bucket_or_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           value: str, inside: str) -> None:
    root = tmp_path / "root"
    cwd = tmp_path / "c1" / "c2"  # relative paths climb from here
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    value = value.replace("{tmp}", str(tmp_path))
    storage = Storage(root)
    base = (root / inside).resolve()
    env = storage.localize_env({"AIP_CHECKPOINT_DIR": value, "GCPGPU_OUTPUT_DIR": value}, "4711")
    for path in env.values():
        assert Path(path).resolve().is_relative_to(base), path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1", "root"]  # nothing made beside the root
    if value.startswith(("gs://", "/gcs/")):  # a trainer argument naming a bucket is mapped too
        args = storage.localize_args(["--ckpt-dir", value], "4711")
        assert Path(args[1]).resolve().is_relative_to(base), args


def test_buckets_are_shared_and_node_paths_are_per_node(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    assert storage.local("gs://b/runs/exp1/", "1") == f"{tmp_path}/gcs/b/runs/exp1/"
    assert storage.local("/gcs/b/runs/exp1", "2") == f"{tmp_path}/gcs/b/runs/exp1"
    assert storage.local("/mnt/shared//runs/./exp1", "1") == f"{tmp_path}/nodes/1/mnt/shared/runs/exp1"
    assert storage.local("/mnt/x", "2") == f"{tmp_path}/nodes/2/mnt/x"
