"""The wheel, installed as a user installs it: built from the sources, put into a fresh virtual environment
with no source tree on its path, it runs the emulator and `cluster up` against it, and `container build`.

`make install` is editable (the package is read from the checkout), so only a real wheel shows a file
the package reads but the wheel lacks. Offline: the build uses this environment's setuptools (no build
isolation), and the new environment borrows this one's installed dependencies through a path entry
(not a site directory, so this environment's editable gcpgpu never loads there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from gcpgpu.fakes.server import PortUnavailable

ROOT = Path(__file__).resolve().parents[1]
# What a source distribution holds, and so all a wheel may be built from.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "gcpgpu", "templates", "containers")
P = ["--project", "wheel-proj"]


def _build_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_bundled"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("gcpgpu-*.whl")
    return wheel


def _venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # A plain path line: this environment's dependencies without running its .pth files (among them
    # the editable finder that would map gcpgpu back to the checkout).
    (Path(site) / "borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _checkout_digest(src: Path) -> str:
    """The sources' digest `container build` names its tag by, as a checkout at `src` gives it."""
    from gcpgpu.image import build

    places = {name: src / name for name in (*build.TOP_FILES, *build.FOLDERS)}
    return build.source_digest(build.context_files(places))


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GCPGPU_", "CLOUDSDK_", "PYTHON", "XDG_"))}
    # A home of its own: the default image record and gcloud's configuration are never the user's.
    return {**env, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_CONFIG_HOME": str(home / "config"), "CLOUDSDK_CONFIG": str(home / "gcloud")}


@pytest.mark.slow
def test_the_installed_wheel_runs_the_emulator_cluster_up_and_container_build(tmp_path):
    wheel = _build_wheel(tmp_path)
    held = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "gcpgpu"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    missing = [name for name in tracked if name not in held]
    assert missing == [], f"files of the package the wheel lacks: {missing}"
    for name in ("gcpgpu/_bundled/templates/startup.sh.j2", "gcpgpu/_bundled/containers/Dockerfile",
                 "gcpgpu/_bundled/pyproject.toml"):
        assert name in held, name

    venv = _venv(tmp_path, wheel)
    env, run_dir = _env(tmp_path), tmp_path / "elsewhere"
    run_dir.mkdir()
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import gcpgpu, sys; print(gcpgpu.__file__); "
                            "print('\\n'.join(sys.path))"], cwd=run_dir, env=env, capture_output=True, text=True)
    module, *path = where.stdout.splitlines()
    assert Path(module).resolve().is_relative_to(venv.resolve()), where.stdout + where.stderr
    assert not [p for p in path if p and Path(p).resolve() == ROOT], path  # no source tree on the path

    gcpgpu = str(venv / "bin" / "gcpgpu")
    server = subprocess.Popen([gcpgpu, "emulator", "start", "--port", "0"], cwd=run_dir, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        said = []
        for line in server.stderr:  # it says where it listens once it does
            said.append(line)
            if "Stop with Ctrl-C" in line:
                break
        found = re.search(r"listening on http://(127\.0\.0\.1:\d+)", "".join(said))
        assert found, "".join(said)
        env["GCPGPU_EMULATOR"] = found.group(1)

        def gcpgpu_cli(*argv: str) -> subprocess.CompletedProcess:
            done = subprocess.run([gcpgpu, *P, *argv], cwd=run_dir, env=env, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
            return done

        gcpgpu_cli("cluster", "up", "w", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
                   "--yes")
        assert "RUNNING" in gcpgpu_cli("cluster", "status", "w").stdout
        # The image's sources come from the wheel's bundled copy: no checkout is needed to build it.
        built = gcpgpu_cli("--region", "us-central1", "container", "build", "--flavor", "none").stdout.strip()
        assert re.fullmatch(r"us-central1-docker\.pkg\.dev/wheel-proj/gcpgpu/gcpgpu-trainer:none-[0-9a-f]{12}", built)
        assert built.endswith(f":none-{_checkout_digest(tmp_path / 'src')[:12]}")  # the same sources, byte for byte
        gcpgpu_cli("cluster", "down", "w", "--yes")
        assert "No gcpgpu clusters" in gcpgpu_cli("cluster", "list").stderr
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize(("error", "says"), [
    (PortUnavailable("REST", 0, 98, "Address already in use"),
     "cannot listen on 127.0.0.1:0 for REST (Address already in use); choose another --port"),
    (FileNotFoundError(2, "No such file or directory", "gcpgpu/fakes/data/world.yaml"), None),
])
def test_emulator_start_blames_the_port_only_when_the_port_failed(monkeypatch, error, says):
    """A wheel without the emulator's data once said 'cannot listen on 127.0.0.1:0': the port was fine."""
    from click.testing import CliRunner

    from gcpgpu.cli import main
    from gcpgpu.fakes import server

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(server, "serve_forever", fail)
    result = CliRunner().invoke(main, ["emulator", "start", "--port", "0"])
    if says:  # bad input: exit 2
        assert result.exit_code == 2 and says in result.output
    else:
        assert result.exception is error and "cannot listen" not in result.output
