"""The README and gcpgpu/data/differences.md point at things that exist: linked files, and every
test named as proof of a "fixed" line (a renamed or deleted test makes the claim stale)."""
from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import free_port

from gcpgpu.fakes.guest.slurm import slurm_installed

ROOT = Path(__file__).resolve().parents[1]
DIFFERENCES = ROOT / "gcpgpu" / "data" / "differences.md"


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_readme_links_point_at_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#:]+)\)", text)
    assert "gcpgpu/data/differences.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


def test_every_test_named_in_differences_exists() -> None:
    text = DIFFERENCES.read_text()
    cited: list[tuple[str, str]] = []
    current = ""
    # `FILE.py::test_x` names a file; a bare `::test_y` that follows means the same file.
    for file_part, name in re.findall(r"`([\w/]+\.py)?::(test_\w+)`", text):
        current = file_part or current
        assert current, f"::{name} names no file before it"
        cited.append((current, name))
    assert len(cited) >= 20
    missing = [f"{f}::{n}" for f, n in cited if n not in _test_names(ROOT / "tests" / f)]
    assert missing == []


# ------------------------------------------------------------------ the README's code blocks (issue 24)
# Each code block of the README, by its first line, and how a test runs it: on the emulator as shown
# (after `setup`, what a reader made before: a cluster, a reservation), as a GPU-sized twin whose
# `job submit` lines run with --dry-run and whose trainer lines are parsed by the trainer (`gpu`), or
# not at all (`skip`: why, and what covers it instead).
@dataclass(frozen=True)
class Twin:
    setup: str = ""
    gpu: bool = False
    skip: str = ""
    code: int = 0
    says: str = ""
    reservation: bool = False  # a reservation "sold" (with its own placement policy) bought outside gcpgpu


SMALL_CLUSTER = "gcpgpu cluster up {} --machine-type a2-highgpu-1g --nodes 2 --region us-central1 --yes"
TWINS: dict[str, Twin] = {
    "make install": Twin(skip="builds .venv from PyPI; test_make_install_says_how_to_put_gcpgpu_on_path checks "
                              "the PATH step it names"),
    "gcpgpu --format json cluster status demo": Twin(setup=SMALL_CLUSTER.format("demo")),
    "gcpgpu emulator start --port 8085": Twin(skip="test_readme_emulator_blocks_run_as_shown (on a free port)"),
    "export GCPGPU_EMULATOR=127.0.0.1:8085": Twin(skip="test_readme_emulator_blocks_run_as_shown (on a free port)"),
    "gcpgpu cluster plan   demo --machine-type a3-highgpu-8g --nodes 4 --region us-central1": Twin(),
    "gcpgpu cluster up   demo --machine-type a3-highgpu-8g --nodes 4 --region us-central1 --yes": Twin(),
    "gcpgpu cluster up flex --machine-type a3-highgpu-8g --nodes 2 --region us-central1 --flex-start 4h --flex-wait 1h "
    "--yes": Twin(),
    "gcpgpu cluster up held --machine-type a3-highgpu-8g --nodes 2 --zone us-central1-a --reservation sold --yes":
        Twin(reservation=True),
    "gcpgpu cluster up  demo --machine-type a3-highgpu-8g --nodes 4 --region us-central1 --iap-ssh --yes":
        Twin(skip="runs ssh (to the emulator's nodes, which the guard here refuses) and nvidia-smi (a GPU node's): "
                  "tests/test_node_ssh.py runs cluster ssh through the emulated nodes' real sshd"),
    "gcpgpu cluster up  work --machine-type a2-highgpu-1g --nodes 2 --region us-central1 --iap-ssh --yes":
        Twin(skip="runs ssh (to the emulator's nodes, which the guard here refuses), writes ~/.ssh/config and "
                  "forward serves until Ctrl-C: tests/test_node_ssh.py runs each line (--all, --nodes, ssh-config "
                  "--write then plain ssh, forward)"),
    "gcpgpu cluster doctor demo": Twin(setup=SMALL_CLUSTER.format("demo")),
    "gcpgpu job submit --vertex --region us-central1 --machine-type a2-highgpu-1g --nodes 2 --wait -- --model tiny "
    "--steps 10 --seq-len 32": Twin(says="SUCCEEDED"),
    "gcpgpu job submit --vertex --region us-central1 --machine-type a3-highgpu-8g --nodes 4 --spot -- --model 350m "
    "--parallel fsdp --precision bf16 --batch-size 32": Twin(gpu=True),
    'JOB=$(gcpgpu job submit --cluster jobs -- --model tiny --steps 10 --seq-len 32)':
        Twin(setup=SMALL_CLUSTER.format("jobs"), says="SUCCEEDED"),
    "gcpgpu cluster up spot --machine-type a2-highgpu-1g --nodes 2 --spot --region us-central1 --yes":
        Twin(says="SUCCEEDED"),
    "gcpgpu cluster up spot8 --machine-type a3-highgpu-8g --nodes 4 --spot --region us-central1 --yes": Twin(gpu=True),
    "gcpgpu cluster up queue --machine-type a2-highgpu-1g --nodes 2 --zone us-central1-a --scheduler slurm --yes":
        Twin(says="SUCCEEDED", skip=slurm_installed() or ""),
    "gcpgpu cluster up away --machine-type a2-highgpu-1g --nodes 2 --spot --no-placement --max-run-duration 8h "
    "--autostop 30m --down --region us-central1 --yes": Twin(says="SUCCEEDED"),
    "gcpgpu cluster up capped --machine-type a2-highgpu-1g --nodes 2 --region us-central1 --max-hourly-cost 20 "
    "--max-spend 50 --yes": Twin(says="SUCCEEDED"),
    "python -m gcpgpu.trainer --model tiny --steps 10 --seq-len 32": Twin(says="Memory per GPU: tiny"),
    "python -m gcpgpu.trainer --model 124m --parallel fsdp --precision bf16 --data synthetic --steps 100 "
    "--batch-size 32": Twin(gpu=True),
    "gcpgpu nccl env --machine-type a3-megagpu-8g": Twin(says="gcpgpu-trainer:"),
    "gcpgpu catalog --region us-east5": Twin(says="prices from the Cloud Billing Catalog, read "),
    "gcpgpu plan train --layers 80 --d-model 8192 --vocab-size 32000 --seq-len 2048 --tokens 1.4T --machine-type "
    "a2-ultragpu-8g --nodes 256": Twin(says="324.1 days"),
    "pushd \"$(mktemp -d)\" >/dev/null && mkdir -p myrun && echo 'print(\"hello from my code\")' > myrun/train.py":
        Twin(says="workdir: 2 files"),
    "pushd \"$(mktemp -d)\" >/dev/null && mkdir -p mycode && echo 'print(\"hello from my image\")' > mycode/train.py":
        Twin(says="image: us-central1-docker.pkg.dev/my-project/gcpgpu/gcpgpu-trainer:none-ctx-"),
    "gcpgpu/cli/        click commands, one module per group (cluster/: a package), loaded lazily: parse, call one":
        Twin(skip="folders, not commands"),
    "gcpgpu/node/       what a node or the image starts: the launcher (preflight), your workspace (workdir,":
        Twin(skip="folders, not commands"),
    "gcpgpu/fakes/      one world of state, backends per API apart from front ends (REST, gRPC); data in":
        Twin(skip="folders, not commands"),
    "tests/             pytest, offline, CPU only; tests/bench/ holds the benchmarks": Twin(skip="folders, not commands"),
}
# Filters a command's output may be piped into; any other `|` in a block runs two commands at once.
FILTERS = ("head", "tail", "grep", "jq", "less", "wc")


def readme_blocks() -> list[tuple[int, list[str]]]:
    """(line number, lines) of every indented code block of the README, indentation removed."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] = []
    lines = (ROOT / "README.md").read_text().splitlines()
    for number, line in enumerate([*lines, ""], start=1):
        if line.startswith("    ") and line.strip():
            current.append(line)
            continue
        if current:
            blocks.append((number - len(current), textwrap.dedent("\n".join(current)).splitlines()))
            current = []
    return blocks


def _twin(lines: list[str]) -> Twin:
    # A block without a twin fails test_every_readme_code_block_has_a_twin, not this module's collection.
    return TWINS.get(lines[0], Twin(skip="no twin yet"))


def test_every_readme_code_block_has_a_twin():
    firsts = [lines[0] for _, lines in readme_blocks()]
    assert sorted(firsts) == sorted(TWINS), "a README block changed: update TWINS (what runs it here, or why not)"


def test_readme_code_blocks_are_safe_to_paste():
    """Pasted whole, a block runs each line as shown, one after the other: no pipe that runs commands at
    once, no placeholder or `...` to fill in, no trailing comment (zsh passes it on as arguments), no
    question that would take the next pasted line as its answer, nothing that serves until Ctrl-C
    with lines after it."""
    wrong = []
    for number, lines in readme_blocks():
        if _twin(lines).skip == "folders, not commands":
            continue
        for line in lines:
            where = f"README.md:{number}: {line}"
            for piped in re.findall(r"\|\s*(\S+)", line):
                if piped not in FILTERS:
                    wrong.append(f"{where}: '| {piped}' runs two commands at once")
            if re.search(r"(^|\s)#", line):
                wrong.append(f"{where}: a comment on a command line")
            if "..." in line or re.search(r"(?<![$\w])[A-Z][A-Z0-9_]{2,}\b(?!=)", line):
                wrong.append(f"{where}: a placeholder to fill in")
            if (re.search(r"gcpgpu cluster (up|down)\b", line) and len(lines) > 1
                    and not re.search(r"--yes|--dry-run", line)):
                wrong.append(f"{where}: asks a question that the next pasted line would answer")
            if "emulator start" in line and len(lines) > 1:
                wrong.append(f"{where}: serves until Ctrl-C, so the lines after it wait")
    assert wrong == []


def _paragraph_before(number: int) -> str:
    """The README's paragraph right above the code block that starts at line `number`, on one line."""
    lines = (ROOT / "README.md").read_text().splitlines()[:number - 1]
    while lines and not lines[-1].strip():
        lines.pop()
    paragraph: list[str] = []
    while lines and lines[-1].strip():
        paragraph.insert(0, lines.pop().strip())
    return " ".join(paragraph)


def _gpu_sized(line: str) -> bool:
    """A line that really runs the bundled trainer (not --dry-run) on a model bigger than tiny: on the
    emulator its processes run on this machine's CPU for hours, and four of a 124m model need ~18 GiB."""
    runs = re.search(r"gcpgpu job submit |gcpgpu\.trainer ", line) and "--dry-run" not in line
    model = re.search(r"--model (\S+)", line)
    return bool(runs and model and model.group(1) != "tiny")


def test_gpu_sized_lines_are_marked_and_kept_out_of_the_emulator_blocks():
    """Issue 36: the README's emulator blocks must run as written when pasted one after another. A block
    that needs GPUs or what only Google Cloud holds (a reservation you bought) is introduced by a
    paragraph that starts "On GPUs", holds no line an emulator block needs, and a block that runs on the
    emulator holds no GPU-sized line; one cluster name is one kind of cluster everywhere, so pasting two
    blocks never meets an earlier block's cluster of another machine type."""
    wrong = []
    kinds: dict[str, set[str]] = {}
    for number, lines in readme_blocks():
        for line in lines:
            up = re.search(r"gcpgpu cluster up +(\S+) .*--machine-type (\S+)", line)
            if up:
                kinds.setdefault(up.group(1), set()).add(up.group(2) + (" --spot" if " --spot" in line else ""))
        twin = _twin(lines)
        if twin.skip:
            continue
        elsewhere = twin.gpu or twin.reservation
        marked = _paragraph_before(number).startswith("On GPUs")
        if elsewhere and not marked:
            wrong.append(f"README.md:{number}: needs GPUs or Google Cloud; say so: 'On GPUs ...' before it")
        if marked and not elsewhere:
            wrong.append(f"README.md:{number}: said to need GPUs, but its twin runs it on the emulator as written")
        wrong += [f"README.md:{number}: {line}: GPU-sized, in a block that runs on the emulator"
                  for line in lines if _gpu_sized(line) and not elsewhere]
    wrong += [f"cluster {name} is made as {' and as '.join(sorted(kind))}" for name, kind in kinds.items()
              if len(kind) > 1]
    assert wrong == []


def test_make_install_says_how_to_put_gcpgpu_on_path():
    """Issue 24 item 8: after `make install`, `gcpgpu` was not on PATH and nothing said how to get it there."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shown = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "run '. .venv/bin/activate' to put it on PATH" in shown.stdout
    install = next(lines for _, lines in readme_blocks() if lines[0] == "make install")
    assert install == ["make install", ". .venv/bin/activate", "gcpgpu --help"]


def _gpu_twin(lines: list[str]) -> list[str]:
    """A GPU-sized block as the emulator can check it in seconds: `job submit` with --dry-run, the trainer's
    arguments parsed by the trainer; the rest (cluster up, plan memory) as shown."""
    out = []
    for line in lines:
        trainer = re.match(r"^(?:python -m|torchrun .*-m) gcpgpu\.trainer (.*)$", line)
        if trainer:
            out.append(f"python -c 'import sys; from gcpgpu.trainer.config import parse_args; parse_args(sys.argv[1:])'"
                       f" {trainer.group(1)}")
        elif line.startswith("gcpgpu job submit "):
            out.append(line.replace(" --wait", "").replace("gcpgpu job submit ", "gcpgpu job submit --dry-run ", 1))
        else:
            out.append(line)
    return out


def _reservation_sold(gcp) -> None:
    from google.cloud import compute_v1

    from gcpgpu.gcp.clients import Clients

    clients = Clients(emulator=gcp.address)
    policy = "projects/my-project/regions/us-central1/resourcePolicies/sold-compact"
    clients.compute("ResourcePoliciesClient").insert(
        project="my-project", region="us-central1", resource_policy_resource=compute_v1.ResourcePolicy(
            name="sold-compact", group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
                collocation="COLLOCATED"))).result()
    clients.compute("ReservationsClient").insert(
        project="my-project", zone="us-central1-a", reservation_resource=compute_v1.Reservation(
            name="sold", specific_reservation_required=True, resource_policies={"placement": policy},
            specific_reservation=compute_v1.AllocationSpecificSKUReservation(
                count=2, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
                    machine_type="a3-highgpu-8g")))).result()


RUN_HERE = [pytest.param(lines, id=f"README.md:{number}") for number, lines in readme_blocks()
            if not _twin(lines).skip]


@pytest.mark.slow
@pytest.mark.parametrize("lines", RUN_HERE)
def test_readme_code_block_runs_on_the_emulator_and_reaches_nothing_else(lines, gcp, tmp_path, monkeypatch):
    """Each block runs as shown (GPU-sized ones as their checked twin) against a fresh emulator, in bash,
    while every Python process it starts is watched: no connection beyond loopback, no gcloud or ssh,
    nothing changed in HOME (issue 24: 'nothing run against the emulator may reach Google Cloud')."""
    from emulator_guard import Guard, watch_this_process

    from gcpgpu.cli import main

    twin = _twin(lines)
    guard = Guard(tmp_path / "guard")
    # The emulator runs in this process and starts the trainers: they are watched through PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", guard.pythonpath(ROOT))
    monkeypatch.setenv("GCPGPU_GUARD_LOG", str(guard.log))
    gcp.faults.update({"operation_seconds": 0})  # Cloud Build's 4 s per build: what a block shows is not its pace
    if twin.reservation:
        _reservation_sold(gcp)
    script = _gpu_twin(lines) if twin.gpu else lines
    work = tmp_path / "work"
    work.mkdir()
    with watch_this_process() as here:
        for line in twin.setup.splitlines():  # what a reader made before, made here (no process to start)
            made = CliRunner().invoke(main, ["--project", "my-project", *shlex.split(line)[1:]])
            assert made.exit_code == 0, made.output
        done = subprocess.run(["bash", "-c", "set -e\n" + "\n".join(script)], cwd=work, capture_output=True,
                              text=True, timeout=600, env=guard.env(ROOT, GCPGPU_EMULATOR=gcp.address))
    output = done.stdout + done.stderr
    assert done.returncode == twin.code, output[-3000:]
    assert twin.says in output, output[-3000:]
    assert guard.problems() + [f"in-process: {r}" for r in here] == []


@pytest.mark.slow
def test_readme_emulator_blocks_run_as_shown(tmp_path):
    """The emulator section's two blocks, in two shells as the README says, on a free port instead of 8085
    (another emulator may hold it): gcpgpu and then gcloud point at it, gcloud in a folder of this
    emulator's own and with the user's project, and the user's own gcloud configuration is untouched."""
    from emulator_guard import Guard

    blocks = {lines[0]: lines for _, lines in readme_blocks()}
    start = blocks["gcpgpu emulator start --port 8085"]
    point = blocks["export GCPGPU_EMULATOR=127.0.0.1:8085"]
    port = str(free_port())
    guard = Guard(tmp_path / "guard")
    env = guard.env(ROOT)
    server = subprocess.Popen(["bash", "-c", "exec " + start[0].replace("8085", port)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        announced = []
        for line in server.stderr:  # the emulator says where it listens once it does
            announced.append(line)
            if "Stop with Ctrl-C" in line:
                break
        assert any(f"127.0.0.1:{port}" in line for line in announced), "".join(announced)
        script = "\n".join(line.replace("8085", port) for line in point) + "\ngcpgpu cluster list"
        done = subprocess.run(["bash", "-c", "set -e\n" + script], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gcloud and gcpgpu now use your project my-project (from your gcloud configuration)" in done.stderr
    assert "No gcpgpu clusters in project my-project." in done.stderr
    folder = guard.home / ".cache" / "gcpgpu" / "emulator-gcloud" / f"127.0.0.1-{port}"
    # gcloud-env writes gcloud's configuration itself (gcloud is not run): the folder of this emulator's own
    written = (folder / "configurations" / "config_default").read_text()
    assert f"compute = http://127.0.0.1:{port}/compute/v1/" in written and "project = my-project" in written
    assert not guard.calls.exists() or not guard.calls.read_text().strip()  # no gcloud call at all
    assert guard.problems(allow_gcloud_under=folder) == []
