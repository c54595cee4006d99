"""job submit --workdir: what is packed (ignore files), the same bytes for the same files, the size cap, and
the staged tarball in the project's staging bucket (read back with google-cloud-storage)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile

import pytest
import yaml
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem
from gcpgpu.image import pack
from gcpgpu.jobs import workdir
from tests.helpers import clients

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
IMAGE = "us-docker.pkg.dev/test-proj/repo/mine:1"


def _tree(root, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _names(packed: pack.Packed) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(packed.data), mode="r:gz") as tar:
        return tar.getnames()


PROJECT_FILES = {
    "train.py": "print('hi')\n", "requirements.txt": "numpy\n", "pkg/model.py": "x = 1\n",
    "data/big.bin": b"\0" * 1000, "ckpt/step1.pt": b"1", "notes.log": "log\n", "keep.log": "keep\n",
    "pkg/__pycache__/model.pyc": b"c", "pkg/sub/.gitignore": "local.txt\n", "pkg/sub/local.txt": "x\n",
    "pkg/sub/other.txt": "y\n", "secret.env": "TOKEN=1\n",
    ".gitignore": "data/\n*.log\n!keep.log\n__pycache__/\n/ckpt\n", ".gcpgpuignore": "secret.env\n",
}
EXPECTED = [".gcpgpuignore", ".gitignore", "keep.log", "pkg/model.py", "pkg/sub/.gitignore", "pkg/sub/other.txt",
            "requirements.txt", "train.py"]


def test_a_plain_folder_follows_its_gitignore_files_and_gcpgpuignore(tmp_path):
    _tree(tmp_path, PROJECT_FILES)
    packed = pack.pack(tmp_path)
    assert _names(packed) == EXPECTED


def test_a_git_work_tree_follows_git_own_rules(tmp_path):
    _tree(tmp_path, PROJECT_FILES)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    # git's excludes beyond .gitignore files count too.
    (tmp_path / ".git" / "info" / "exclude").write_text("pkg/sub/other.txt\n")
    assert _names(pack.pack(tmp_path)) == [n for n in EXPECTED if n != "pkg/sub/other.txt"]


def test_the_same_files_pack_to_the_same_bytes_whatever_their_times_and_owners(tmp_path):
    _tree(tmp_path, {"b.py": "b\n", "a/c.py": "c\n", "run.sh": "#!/bin/sh\n"})
    (tmp_path / "run.sh").chmod(0o755)
    first = pack.pack(tmp_path)
    for path in tmp_path.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
    second = pack.pack(tmp_path)
    assert first.data == second.data and first.sha256 == second.sha256
    assert workdir.object_name(first) == f"gcpgpu-staging/workdir-{first.sha256}.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(first.data), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["a/c.py", "b.py", "run.sh"]
    assert {(m.mtime, m.uid, m.gid) for m in members} == {(0, 0, 0)}
    assert [m.mode for m in members] == [0o644, 0o644, 0o755]


def test_a_link_out_of_the_folder_is_left_out(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("private\n")
    root = tmp_path / "w"
    _tree(root, {"train.py": "x\n"})
    (root / "leak.txt").symlink_to(outside)
    assert _names(pack.pack(root)) == ["train.py"]


def test_over_the_cap_is_refused_naming_the_biggest_and_the_ignore_file(tmp_path, monkeypatch):
    monkeypatch.setattr(pack, "MAX_PACKED", 64 * 1024)
    _tree(tmp_path, {"train.py": "x\n", "a.bin": os.urandom(200_000), "b.bin": os.urandom(100_000),
                     "c.bin": os.urandom(50_000), "d.bin": os.urandom(10)})
    with pytest.raises(UsageProblem) as e:
        pack.pack(tmp_path)
    line = str(e.value)
    assert "a.bin" in line and "b.bin" in line and "c.bin" in line and "d.bin" not in line
    assert ".gcpgpuignore" in line and "\n" not in line


def _submit(*extra: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), "job", "submit", "--vertex",
                                     "--machine-type", "a3-highgpu-8g", "--image", IMAGE, *extra])


def test_dry_run_lists_the_files_and_size_and_uploads_nothing(gcp, tmp_path):
    _tree(tmp_path, {"train.py": "print(1)\n", "big.log": "x\n", ".gitignore": "*.log\n"})
    result = _submit("--workdir", str(tmp_path), "--command", "python train.py", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "workdir: 2 files" in result.stderr and "train.py" in result.stderr and "big.log" not in result.stderr
    request = yaml.safe_load(result.stdout)
    env = {e["name"]: e["value"] for e in request["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]}
    assert env["GCPGPU_WORKDIR"].startswith("gs://test-proj-gcpgpu-staging/gcpgpu-staging/workdir-")
    assert not [b.name for b in clients(gcp).storage().list_buckets()]


def test_submit_stages_the_tarball_once_in_the_project_staging_bucket(gcp, tmp_path):
    _tree(tmp_path, {"train.py": "print(1)\n"})
    first = _submit("--workdir", str(tmp_path), "--command", "python train.py", fmt="json")
    assert first.exit_code == 0, first.output
    storage = clients(gcp).storage()
    bucket = storage.get_bucket("test-proj-gcpgpu-staging")
    assert bucket.location == "US-CENTRAL1"
    [blob] = list(storage.list_blobs(bucket))
    with tarfile.open(fileobj=io.BytesIO(blob.download_as_bytes()), mode="r:gz") as tar:
        assert tar.extractfile("train.py").read() == b"print(1)\n"
    assert "uploaded to gs://test-proj-gcpgpu-staging/" in first.stderr
    again = _submit("--workdir", str(tmp_path), "--command", "python train.py", fmt="json")
    assert again.exit_code == 0, again.output
    assert "already staged at" in again.stderr
    assert len(list(storage.list_blobs(bucket))) == 1
    job = json.loads(again.stdout)
    assert job["id"].startswith("vertex:")


@pytest.mark.parametrize("target", ["vertex", "cluster"])
def test_a_workdir_over_the_cap_stops_submit_in_one_line_before_any_request(gcp, tmp_path, monkeypatch, target):
    """The issue's bad input through the CLI: exit 2, one line naming --workdir, its biggest entries and the
    ignore file, and no request (not even the staging bucket's)."""
    monkeypatch.setattr(pack, "MAX_PACKED", 64 * 1024)
    _tree(tmp_path, {"train.py": "x\n", "weights.pt": os.urandom(200_000)})  # random: it does not compress
    where = ["--vertex", "--machine-type", "a3-highgpu-8g"] if target == "vertex" else ["--cluster", "c"]
    gcp.requests.clear()
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", *where, "--image", IMAGE,
                                       "--workdir", str(tmp_path), "--command", "python train.py"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: --workdir ") and "weights.pt" in line and ".gcpgpuignore" in line
    assert gcp.requests.all() == []


def test_one_tarball_named_by_its_content_serves_a_cluster_and_vertex(gcp, tmp_path):
    _tree(tmp_path, {"train.py": "print(1)\n", "conf.yaml": "lr: 1\n"})
    up = CliRunner().invoke(main, [*GLOBAL, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1",
                                   "--zone", "us-central1-a", "--yes"])
    assert up.exit_code == 0, up.output
    uris = set()
    for where in (["--vertex", "--machine-type", "a2-highgpu-1g"], ["--cluster", "c"]):
        result = CliRunner().invoke(main, [*GLOBAL, "--format", "json", "job", "submit", *where, "--image", "busybox",
                                           "--workdir", str(tmp_path), "--command", "sleep 1"])
        assert result.exit_code == 0, result.output
        uris.update(re.findall(r"gs://test-proj-gcpgpu-staging/gcpgpu-staging/workdir-[0-9a-f]{64}\.tar\.gz",
                               result.stderr))
    [blob] = list(clients(gcp).storage().list_blobs("test-proj-gcpgpu-staging"))
    assert uris == {f"gs://test-proj-gcpgpu-staging/{blob.name}"}
    assert blob.name == f"gcpgpu-staging/workdir-{hashlib.sha256(blob.download_as_bytes()).hexdigest()}.tar.gz"
