"""containers/entrypoint.sh started as root, as the image starts: root makes the mounts' links (a top-level
mount point such as /data, which only root may create), then the script runs again as GCPGPU_USER, so the
setup, the user's command and the trainer never run as root.

Needs root (the test machine's own user) and an unprivileged user to become: `nobody`, running the system's
/usr/bin/python3 (the test's own Python may sit where nobody cannot read). Skipped otherwise. The checkout
may sit under a folder only its owner can enter (a `mktemp -d` folder, /root): the entrypoint, gcpgpu and
the few libraries the launcher imports are copied to a folder every user may walk into, and run from there.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENTRYPOINT = REPO / "containers" / "entrypoint.sh"
SYSTEM_PYTHON = "/usr/bin/python3"


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _system_python_matches() -> bool:
    """Whether /usr/bin/python3 is this Python's version, so it can import the test's packages (click, yaml)."""
    try:
        done = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                              text=True, timeout=30)
    except OSError:
        return False
    return done.stdout.strip() == str(sys.version_info[:2])


NOBODY = _nobody()
pytestmark = pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0 or NOBODY is None or not _system_python_matches(),
    reason=f"needs to run as root, a 'nobody' user and a {SYSTEM_PYTHON} of this Python's version",
)


# What the entrypoint runs before and after it becomes the user (gcpgpu.node.launch and what it imports lazily).
LAUNCHER_MODULES = ("gcpgpu.node.launch", "gcpgpu.catalog", "gcpgpu.nccl", "gcpgpu.errors", "gcpgpu.resources")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def _walkable_folder(prefix: str) -> Path:
    """A new folder every user may walk into (pytest's own tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def code() -> Iterator[tuple[Path, str]]:
    """(the entrypoint, PYTHONPATH): copies of the checkout's entrypoint and gcpgpu, and of the libraries
    the launcher imports from this venv, in a folder every user may walk into, so `nobody` can run them
    wherever the checkout and its venv sit."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    listed = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import importlib, sys\n"
                              f"for m in {LAUNCHER_MODULES!r}: importlib.import_module(m)\n"
                              "print('\\n'.join(str(getattr(m, '__file__', None)) for m in list(sys.modules.values())))"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(REPO), str(purelib)])},
        capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    libraries = {Path(f).relative_to(purelib).parts[0] for f in listed.stdout.split()
                 if Path(f).is_relative_to(purelib)}
    root = _walkable_folder("gcpgpu-code-")
    try:
        shutil.copytree(REPO / "gcpgpu", root / "repo" / "gcpgpu", ignore=_IGNORE)
        shutil.copytree(REPO / "containers", root / "repo" / "containers")  # the entrypoint and versions.env
        for name in sorted(libraries):
            source = purelib / name
            if source.is_dir():
                shutil.copytree(source, root / "site" / name, ignore=_IGNORE)
            else:
                (root / "site").mkdir(exist_ok=True)
                shutil.copy2(source, root / "site" / name)
        for folder in [root, *root.rglob("*")]:  # readable whatever this process's umask is
            folder.chmod(0o755 if folder.is_dir() else 0o644)
        yield root / "repo" / "containers" / "entrypoint.sh", os.pathsep.join([str(root / "repo"), str(root / "site")])
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every user may walk into, where the test's files go."""
    path = _walkable_folder("gcpgpu-user-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def run(code):
    entrypoint, pythonpath = code

    def _run(base: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
        (base / "sysroot").mkdir(exist_ok=True)
        environ = {
            "PATH": "/usr/bin:/bin",
            "HOME": "/root",  # what docker gives a container started as root
            "PYTHONPATH": pythonpath,
            "GCPGPU_PYTHON": SYSTEM_PYTHON,
            "GCPGPU_SYSROOT": str(base / "sysroot"),
            "GCPGPU_MACHINE_TYPE": "a2-highgpu-1g",
            "GCPGPU_METADATA_URL": "http://127.0.0.1:9/computeMetadata/v1",  # nothing answers: no metadata server
            "GCPGPU_GCS_ROOT": str(base / "gcs"),
            **env,
        }
        return subprocess.run(["bash", str(entrypoint), *args], env=environ, capture_output=True, text=True,
                              timeout=60, cwd=base)

    return _run


def test_started_as_root_it_links_a_top_level_mount_point_then_runs_the_command_as_the_images_user(base, run):
    assert NOBODY is not None
    (base / "gcs" / "data-bkt" / "sets").mkdir(parents=True)
    (base / "gcs" / "data-bkt" / "sets" / "x.txt").write_text("42\n")
    (base / "gcs" / "out-bkt").mkdir()
    top = base / "top"  # stands in for the container's /: root's, and no one else may write it
    top.mkdir(mode=0o755)
    mounts = [{"source": "gs://data-bkt/sets", "target": str(top / "data"), "ro": True},
              {"source": "gs://out-bkt/runs/7", "target": str(top / "out")}]
    script = f'id -u; echo "$HOME $USER"; cat {top}/data/x.txt; echo result > {top}/out/y.txt'
    result = run(base, "bash", "-c", script, GCPGPU_USER="nobody", GCPGPU_MOUNTS=json.dumps(mounts))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(NOBODY.pw_uid), f"{NOBODY.pw_dir} nobody", "42"]
    assert os.readlink(top / "data") == str(base / "gcs" / "data-bkt" / "sets")
    assert f"mount {top / 'data'} -> gs://data-bkt/sets (read-only)" in result.stderr
    # The output folder root made in the bucket is the user's, so its files are too.
    written = base / "gcs" / "out-bkt" / "runs" / "7" / "y.txt"
    assert written.read_text() == "result\n" and written.stat().st_uid == NOBODY.pw_uid
    assert (base / "gcs" / "out-bkt" / "runs").stat().st_uid == NOBODY.pw_uid


def test_the_setup_and_the_command_run_as_the_user_and_cannot_become_root_again(base, run):
    assert NOBODY is not None
    result = run(base, "bash", "-c", "id -u; python3 -c 'import os; os.setuid(0)' 2>&1 | tail -n 1",
                  GCPGPU_USER=str(NOBODY.pw_uid), GCPGPU_SETUP="echo setup as $(id -u)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"setup as {NOBODY.pw_uid}", str(NOBODY.pw_uid),
                                          "PermissionError: [Errno 1] Operation not permitted"]


@pytest.mark.parametrize("user", ["root", "0", "no-such-user"])
def test_a_root_or_unknown_user_is_refused_in_one_line_and_nothing_runs(base, run, user):
    result = run(base, "bash", "-c", "echo ran", GCPGPU_USER=user)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gcpgpu-entrypoint: GCPGPU_USER: ")
    assert ("is root" in line) if user != "no-such-user" else ("no user 'no-such-user' in this image" in line)
    assert result.stdout == ""


def test_a_mount_root_cannot_make_stops_before_becoming_the_user(base, run):
    (base / "gcs" / "data-bkt").mkdir(parents=True)
    mounts = [{"source": "gs://data-bkt/absent", "target": str(base / "top" / "data"), "ro": True}]
    result = run(base, "bash", "-c", "echo ran", GCPGPU_USER="nobody", GCPGPU_MOUNTS=json.dumps(mounts))
    assert result.returncode == 3
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gcpgpu-entrypoint: GCPGPU_MOUNTS: gs://data-bkt/absent") and "nothing at" in line
    assert result.stdout == ""


def test_root_makes_no_folder_for_the_user_through_a_link_a_job_planted_in_gcs(base, run):
    # Issue 36: a job's link in a bucket made root create a folder elsewhere and hand it to the job's user.
    outside = base / "outside"  # stands in for any folder of the container (or the host behind /gcs)
    outside.mkdir(mode=0o755)
    (base / "gcs" / "out-bkt").mkdir(parents=True)
    (base / "gcs" / "out-bkt" / "evil").symlink_to(outside)
    mounts = [{"source": "gs://out-bkt/evil/runs", "target": str(base / "top" / "out")}]
    result = run(base, "bash", "-c", "echo ran", GCPGPU_USER="nobody", GCPGPU_MOUNTS=json.dumps(mounts))
    assert result.returncode == 3
    (line,) = result.stderr.strip().splitlines()
    assert line == (f"gcpgpu-entrypoint: GCPGPU_MOUNTS: gs://out-bkt/evil/runs on {base / 'top' / 'out'}: "
                    f"{base / 'gcs' / 'out-bkt' / 'evil'} is a link (or a file), not a folder: mount folders are "
                    "made without following links; refused")
    assert result.stdout == "" and list(outside.iterdir()) == [] and outside.stat().st_uid == 0
