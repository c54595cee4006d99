"""job submit --workdir: what is packed (ignore files), the same bytes for the same files, the size cap, and
the staged tarball in the project's staging bucket (read back with google-cloud-storage)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

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


def test_a_cluster_that_is_not_there_is_said_before_the_workdir_is_uploaded(gcp, tmp_path):
    _tree(tmp_path, {"train.py": "print(1)\n"})
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", "--cluster", "mien", "--image", IMAGE,
                                       "--workdir", str(tmp_path), "--command", "python train.py"])
    assert result.exit_code != 0
    assert "mien" in result.output and "uploaded" not in result.output
    assert [b.name for b in clients(gcp).storage().list_buckets()] == []


def test_a_spec_files_cluster_key_names_the_cluster(gcp, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(f"cluster: inj\nimage: {IMAGE}\ncommand: python train.py\n")
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", "-f", str(spec)])
    assert result.exit_code != 0
    assert "no cluster named inj" in result.output and "None" not in result.output


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


# -- issue 36: staged code verified, paths kept under the folder, ignore files in bounded time -------------


def test_a_staged_archive_another_job_changed_is_uploaded_again(gcp, tmp_path):
    """The staging bucket is writable from every job: an object whose bytes no longer match its
    content-addressed name is not 'already staged', it is uploaded again."""
    _tree(tmp_path, {"train.py": "print(1)\n"})
    first = _submit("--workdir", str(tmp_path), "--command", "python train.py", fmt="json")
    assert first.exit_code == 0, first.output
    [blob] = list(clients(gcp).storage().list_blobs("test-proj-gcpgpu-staging"))
    # As a job would: it writes the object's file through its /gcs mount, not through the API.
    gcp.storage.store.path("test-proj-gcpgpu-staging", blob.name).write_bytes(b"not your code")
    again = _submit("--workdir", str(tmp_path), "--command", "python train.py", fmt="json")
    assert again.exit_code == 0, again.output
    assert "already staged" not in again.stderr
    assert "does not hold what its name says" in again.stderr and "uploaded to gs://" in again.stderr
    [blob] = list(clients(gcp).storage().list_blobs("test-proj-gcpgpu-staging"))
    assert blob.name == f"gcpgpu-staging/workdir-{hashlib.sha256(blob.download_as_bytes()).hexdigest()}.tar.gz"
    # Unchanged since: the next submit finds the same bytes (by their MD5) and uploads nothing.
    third = _submit("--workdir", str(tmp_path), "--command", "python train.py", fmt="json")
    assert third.exit_code == 0 and "already staged at" in third.stderr, third.output


def test_a_tracked_file_whose_folder_became_a_link_out_is_left_out_and_named(gcp, tmp_path):
    outside = tmp_path / "outside"
    _tree(outside, {"f.py": "private\n"})
    root = tmp_path / "w"
    _tree(root, {"train.py": "x\n", "sub/f.py": "mine\n", "inside/g.py": "g\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    # git still lists sub/f.py (tracked) after sub/ is replaced by a link out of the folder.
    for f in (root / "sub").iterdir():
        f.unlink()
    (root / "sub").rmdir()
    (root / "sub").symlink_to(outside, target_is_directory=True)
    (root / "alias").symlink_to(root / "inside", target_is_directory=True)  # a link that stays inside is fine
    packed = pack.pack(root)
    assert _names(packed) == ["inside/g.py", "train.py"]
    assert packed.skipped == ("sub", "sub/f.py")  # the link itself (untracked) and the file git tracks under it
    result = _submit("--workdir", str(root), "--command", "python train.py", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "workdir: left out 2 path(s) that lead out of the folder (links): sub, sub/f.py" in result.stderr
    assert "private" not in result.output


HOSTILE_PATTERNS = ["**/" * 20 + "x", "*a*a*a*a*a*a*a*a*a*a*a*a*b", "/" + "**/" * 20 + "*a*a*a*a*a*a*a*a*a*a*a*a*b"]
PACK_CHILD = "import sys, pathlib; from gcpgpu.image import pack; print('\\n'.join(pack.list_files(pathlib.Path(sys.argv[1]))))"


@pytest.mark.parametrize(("ignore_file", "git"), [(".gcpgpuignore", False), (".gitignore", False), (".gcpgpuignore", True)],
                         ids=["gcpgpuignore", "gitignore-no-git", "gcpgpuignore-in-git"])
def test_hostile_ignore_patterns_finish(tmp_path, ignore_file, git):
    """The issue's patterns ran for 11+ minutes (regular expressions that backtrack): against long names and
    deep paths they now finish. The guard is a child process with a generous timeout, not a clock. (Inside a
    git work tree a .gitignore is git's to read, with git's own matcher.)"""
    deep = "/".join(["d"] * 30)
    _tree(tmp_path, {"a" * 60: "1\n", f"{deep}/{'a' * 40}": "2\n", f"{deep}/x": "3\n", f"{deep}/{'a' * 30}b": "4\n",
                     "keep.py": "5\n", ignore_file: "\n".join(HOSTILE_PATTERNS) + "\n"})
    if git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(pack.__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PACK_CHILD, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == sorted([ignore_file, "a" * 60, f"{deep}/{'a' * 40}", "keep.py"])


# Patterns git reads oddly or not at all ('[z-a]' matches 'z', an unclosed '[' matches nothing, '**' after a
# literal prefix counts as a folder boundary): each is matched as `git check-ignore` matches it.
GIT_PATTERNS = [
    "a", "/a", "a/", "*", "**", "/**", "**/a", "**/**/a", "a/**", "k/**", "k/**/b", "k/**/**/b", "k/*/b", "x/**/a",
    "*/a", "x/*", "?", "??", "[ab]", "[!ab]", "[^ab]", "[a-c]", "[z-a]", "[]", "[!]", "[\\]", "[]]", "[!]]",
    "[]a]", "[a-]", "[[:alpha:]]", "[[:digit:]]*", "[[:foo:]]", "[[:alpha:]", "[:a]", "\\#x", "#x", "a\\", "a\\ ",
    "a ", "!a", "*\n!a", "a*b", "a**b", "*.log", "/*.log", "d/*.log", "foo/**/baz", "foo/**", "**/foo", "*a*a*b",
    "a?b", "a[-]b", "x/y", "x//y", "/x/", "q/**/t", "q/**/**/t", "**/r/**", "[!/]", "x[/]y", "\\[", "[\\-]",
    "[a\\-c]", "*/", "**/", "*/*/", "[[:space:]]", "a[[:space:]]", ".*", "é", "?é", "[é]", "[[]", "[[]]", "[[:]]",
    "[[::]]", "k-**/b", "k**/**", "k**\\/**", "q/r**/t", "foo\\/**",
]
GIT_PATHS = [
    "a", "b", "ab", "abc", "z", "x/a", "x/y/a", "x/y/b", "k/b", "k/x/b", "k/x/y/b", "k-b/c", "kz", "foo/bar/baz",
    "foo.log", "d/foo.log", "é", "aé", "]", "!", "[", "-", "a-b", "#x", "a b", "a ", "A", "Z9", "x/foo", "foo/x",
    "abcb", "aaaaab", "aXbXc", "q/r/s/t", "q/rr/t", ".hidden", "d/.hidden", "b]", "a\\",
]


def test_ignore_patterns_match_as_git_check_ignore_does(tmp_path):
    from gcpgpu.image.ignore import Rules, ignored

    root = tmp_path / "t"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    _tree(root, {p: "x\n" for p in GIT_PATHS})
    differ = []
    for pattern in GIT_PATTERNS:
        (root / ".gitignore").write_text(pattern + "\n")
        check = subprocess.run(["git", "-C", str(root), "check-ignore", "--no-index", "-z", "--stdin"],
                               input="\0".join(GIT_PATHS).encode() + b"\0", capture_output=True, timeout=60)
        assert check.returncode in (0, 1), check.stderr
        theirs = {p.decode() for p in check.stdout.split(b"\0") if p}
        rules = [Rules((pattern + "\n").encode())]
        for path in GIT_PATHS:
            parts = path.split("/")
            ours = any(ignored(rules, "/".join(parts[:i]), True) for i in range(1, len(parts))) \
                or ignored(rules, path, False)
            if ours != (path in theirs):
                differ.append((pattern, path, "git", path in theirs))
    assert differ == []


@pytest.mark.parametrize("name", [".gcpgpuignore", ".gitignore"])
def test_an_ignore_file_over_the_cap_is_refused_in_one_line(tmp_path, name):
    _tree(tmp_path, {"train.py": "x\n"})
    with (tmp_path / name).open("wb") as f:
        f.write(b"*.log\n")
        f.truncate(2**20 + 1)  # one byte over (the 2 GiB file: tests/test_bad_inputs.py, memory-capped)
    with pytest.raises(UsageProblem) as e:
        pack.pack(tmp_path)
    assert str(e.value) == (f"{tmp_path / name}: {2**20 + 1} bytes, over the 1 MiB cap for an ignore file "
                            "(gitignore patterns, one a line)")
    (tmp_path / name).write_bytes(b"*.log\n".ljust(2**20, b"#"))  # at the cap: read
    assert _names(pack.pack(tmp_path)) == [name, "train.py"]
