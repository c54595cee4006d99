"""Job specs: the CustomJob rendered for each A2/A3 shape, and bad input refused before any API call."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
import yaml
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem
from gcpgpu.jobs import ids
from gcpgpu.jobs.spec import JobSpec, validate
from gcpgpu.jobs.vertex import build_request
from gcpgpu.resources import render

PROJECT = "test-proj"
GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
TRAINER = ["--model", "tiny", "--steps", "5", "--batch-size", "64"]


IMAGE = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:tcpx-0123456789ab"


def vertex_request(**kw) -> dict:
    kw.setdefault("target", "vertex")
    kw.setdefault("image", IMAGE)
    kw.setdefault("args", TRAINER)
    zone = kw.pop("zone", None)
    job = validate(JobSpec(**kw), project=PROJECT, region="us-central1", zone=zone)
    return build_request(job, PROJECT)


def env_of(pool: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pool["containerSpec"]["env"]}


SHAPES = [("a2-highgpu-8g", "NVIDIA_TESLA_A100", "none"), ("a3-highgpu-8g", "NVIDIA_H100_80GB", "tcpx"),
          ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", "tcpxo")]


@pytest.mark.parametrize("nodes", [1, 4])
@pytest.mark.parametrize(("machine_type", "accelerator", "flavor"), SHAPES)
def test_custom_job_pools_and_accelerators(machine_type, accelerator, flavor, nodes):
    request = vertex_request(machine_type=machine_type, nodes=nodes, name="exp")
    assert request["parent"] == f"projects/{PROJECT}/locations/us-central1"
    job = request["customJob"]
    assert job["displayName"] == "exp" and job["labels"] == {"gcpgpu-managed": "true", "gcpgpu-job": "exp"}
    pools = job["jobSpec"]["workerPoolSpecs"]
    # Pool 0 is the primary with exactly one replica; pool 1 carries the rest, and only when there is a rest.
    assert [p["replicaCount"] for p in pools] == ([1] if nodes == 1 else [1, nodes - 1])
    for pool in pools:
        assert pool["machineSpec"] == {"machineType": machine_type, "acceleratorType": accelerator,
                                       "acceleratorCount": 8}
        assert pool["containerSpec"]["imageUri"] == IMAGE
        assert pool["containerSpec"]["args"] == TRAINER and "command" not in pool["containerSpec"]
        env = env_of(pool)
        assert env["GCPGPU_MACHINE_TYPE"] == machine_type
        assert "LD_LIBRARY_PATH" not in env  # the entrypoint prepends it to the image's own
    env = env_of(pools[0])
    if flavor == "tcpx":
        assert env["NCCL_NET"] == "GPUDirectTCPX_v7" and env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    elif flavor == "tcpxo":
        assert env["NCCL_FASTRAK_IFNAME"].split(",") == [f"eth{i}" for i in range(1, 9)]
    else:
        assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_NET" not in env
    assert job["jobSpec"]["scheduling"] == {"strategy": "STANDARD"}
    assert "reservationAffinity" not in pools[0]["machineSpec"]


def test_the_library_reads_the_rendered_job():
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    request = vertex_request(machine_type="a3-megagpu-8g", nodes=4, strategy="flex-start", max_wait=3600,
                             timeout=7200, restart="never", output_dir="gs://bkt/runs/1")
    job = aiplatform_v1.CustomJob.wrap(json_format.ParseDict(request["customJob"], aiplatform_v1.CustomJob.pb()()))
    spec = job.job_spec
    assert spec.worker_pool_specs[1].replica_count == 3
    assert spec.worker_pool_specs[0].machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_H100_MEGA_80GB
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
    assert spec.scheduling.max_wait_duration.total_seconds() == 3600
    assert spec.scheduling.timeout.total_seconds() == 7200 and spec.scheduling.disable_retries
    assert spec.base_output_directory.output_uri_prefix == "gs://bkt/runs/1"


@pytest.mark.parametrize(("reservation", "zone", "values"), [
    ("res-a", "us-central1-b", [f"projects/{PROJECT}/zones/us-central1-b/reservations/res-a"]),
    ("projects/other/zones/us-central1-a/reservations/big", None, ["projects/other/zones/us-central1-a/reservations/big"]),
])
def test_specific_reservation_affinity(reservation, zone, values):
    pools = vertex_request(machine_type="a3-highgpu-8g", nodes=4, reservation=reservation, zone=zone)[
        "customJob"]["jobSpec"]["workerPoolSpecs"]
    for pool in pools:
        assert pool["machineSpec"]["reservationAffinity"] == {
            "reservationAffinityType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
            "values": values}


def test_any_reservation_and_spot():
    pools = vertex_request(machine_type="a2-highgpu-8g", reservation="any")["customJob"]["jobSpec"]["workerPoolSpecs"]
    assert pools[0]["machineSpec"]["reservationAffinity"] == {"reservationAffinityType": "ANY_RESERVATION"}
    job = vertex_request(machine_type="a2-highgpu-8g", strategy="spot")["customJob"]
    assert job["jobSpec"]["scheduling"]["strategy"] == "SPOT"


def test_user_strings_survive_the_template_unchanged():
    tricky = "a: b\n- c\n\"quoted\" 'single' {{ not jinja }} $(rm -rf /)"
    request = vertex_request(machine_type="a2-highgpu-8g", env={"NOTE": tricky, "NCCL_DEBUG": "INFO"},
                             args=[*TRAINER, "--data", tricky], labels={"team": "x-1"})
    pool = request["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    assert env_of(pool)["NOTE"] == tricky and env_of(pool)["NCCL_DEBUG"] == "INFO"  # the user's NCCL value wins
    assert pool["containerSpec"]["args"][-1] == tricky
    assert request["customJob"]["labels"]["team"] == "x-1"


def test_agent_script_quotes_every_user_string(tmp_path):
    evil = "x'; touch /tmp/gcpgpu-pwned; echo '$(id)"
    script = render("job_agent.sh.j2", job_id="train-abc123", container="gcpgpu-job-train-abc123", rank=1, nnodes=2,
                    master_addr="10.0.0.2", master_port=29500, image="img:1", command=[], args=["--data", evil],
                    env={"NOTE": evil}, mounts=["/dev/aperture_devices"], timeout=0)
    path = tmp_path / "agent.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert shlex.quote(evil) in script and shlex.quote(f"NOTE={evil}") in script
    assert "--env NODE_RANK=1" in script and "--env MASTER_ADDR=10.0.0.2" in script


def test_startup_script_installs_the_job_watcher():
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec

    p = plan(ClusterSpec(name="c", machine_type="a2-highgpu-8g", nodes=2).validate(default_region="us-central1"), PROJECT)
    script = next(i["value"] for i in p.instance_properties["metadata"]["items"] if i["key"] == "startup-script")
    assert "gcpgpu-job-watcher.service" in script and "gcpgpu-job-agent" in script


def test_spec_file_and_flags(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"vertex": True, "machine_type": "a3-highgpu-8g", "nodes": 2, "spot": True,
                                    "env": {"A": 1}, "args": "--model tiny --steps 3 --batch-size 64",
                                    "timeout": "2h"}))
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", "-f", str(path), "--nodes", "4", "--env", "B=2",
                                       "--dry-run"])
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(result.stdout)["customJob"]
    assert job["jobSpec"]["workerPoolSpecs"][1]["replicaCount"] == 3  # the flag beat the file
    assert job["jobSpec"]["scheduling"] == {"strategy": "SPOT", "timeout": "7200s"}
    env = env_of(job["jobSpec"]["workerPoolSpecs"][0])
    assert env["A"] == "1" and env["B"] == "2"
    assert job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] == ["--model", "tiny", "--steps", "3",
                                                                              "--batch-size", "64"]


def test_dry_run_json(gcp):
    result = CliRunner().invoke(main, [*GLOBAL, "--format", "json", "job", "submit", "--vertex", "--machine-type",
                                       "a2-highgpu-8g", "--dry-run", "--", *TRAINER])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == 1
    # Nothing sent but the registry's list (the default image is looked up as submit looks it up).
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in gcp.requests.all()] == [("GET", "dockerImages")]


BAD_INPUT = [
    (["--", *TRAINER], "--vertex"),
    (["--vertex", "--", *TRAINER], "--machine-type is required"),
    (["--vertex", "--cluster", "c", "--machine-type", "a2-highgpu-8g"], "exclude each other"),
    (["--vertex", "--machine-type", "a3-edgegpu-8g"], "not offered by Vertex AI"),
    (["--vertex", "--machine-type", "a9-nothing-8g"], "not a known GPU machine type"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--spot", "--flex-start"], "--spot and --flex-start"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--spot", "--reservation", "any"], "--reservation cannot be used with --spot"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--reservation", "res-a"], "--zone ZONE"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--reservation", "projects/p/zones/europe-west4-a/reservations/r"],
     "outside the job's region us-central1"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--max-wait", "1h"], "--max-wait applies only with --flex-start"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--nodes", "0"], "--nodes 0"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--env", "1BAD=x"], "not an environment variable name"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--env", "NCCL_ALGO=Fastest"], "--env NCCL_ALGO"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--output-dir", "/tmp/out"], "must be a Cloud Storage folder"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--name", "Bad_Name"], "--name 'Bad_Name'"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--", "--steps", "abc"], "trainer arguments: argument --steps"),
    (["--vertex", "--machine-type", "a2-highgpu-8g", "--", "--model", "huge"], "trainer arguments: --model"),
    (["--vertex", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--", "--batch-size", "8"],
     "does not split over 16 GPU processes"),
    (["--cluster", "c", "--spot"], "--spot applies to --vertex jobs"),
    (["--cluster", "c", "--reservation", "any"], "--reservation applies to --vertex jobs"),
    (["--cluster", "Bad!"], "is not a cluster name"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_INPUT)
def test_bad_input_is_refused_before_any_api_call(gcp, argv, expected):
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", *argv])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith("Error: ") and "\n" not in line and expected in line, line
    assert len(gcp.requests) == 0  # refused here: the emulator saw nothing


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
def test_bad_job_id_is_refused(gcp, command):
    result = CliRunner().invoke(main, [*GLOBAL, "job", command, "12345"])
    assert result.exit_code == 2 and "is not a job id" in result.output
    assert len(gcp.requests) == 0


def test_job_ids_round_trip():
    assert str(ids.parse("vertex:us-central1:123")) == "vertex:us-central1:123"
    full = ids.parse("projects/42/locations/europe-west4/customJobs/99")
    assert (full.location, full.job, full.resource_name("p")) == ("europe-west4", "99",
                                                                  "projects/42/locations/europe-west4/customJobs/99")
    assert ids.parse("cluster:c:train-abc123").cluster == "c"


def test_secret_looking_env_names_draw_a_warning():
    job = validate(JobSpec(target="vertex", machine_type="a2-highgpu-8g", env={"HF_TOKEN": "x"}), project=PROJECT,
                   region="us-central1", zone=None)
    assert any("HF_TOKEN looks like a secret" in w for w in job.warnings)


def test_missing_region_for_vertex():
    with pytest.raises(UsageProblem, match="no region set"):
        validate(JobSpec(target="vertex", machine_type="a2-highgpu-8g"), project=PROJECT, region=None, zone=None)


@pytest.mark.parametrize("image", [
    "busybox", "busybox:1.36", "library/busybox@sha256:" + "a" * 64, "localhost:5000/team/img:dev",
    "us-central1-docker.pkg.dev/my-proj/repo/gcpgpu-trainer:v1.2_rc-3",
    "nvcr.io/nvidia/pytorch:24.12-py3", "ghcr.io/org/sub__name/x-y.z:Tag"])
def test_container_image_references_docker_takes_are_accepted(image):
    assert validate(JobSpec(target="cluster", cluster="c", image=image), project=PROJECT, region=None,
                    zone=None).image == image


@pytest.mark.parametrize("out", ["gs://b-1/runs/exp1", "gs://b-1/runs/exp1/", "gs://b-1", "gs://my.bucket.example/x",
                                 "/mnt/shared/runs/", "/gcs/b-1/runs/exp1"])
def test_output_dirs_without_dot_segments_are_accepted(out):
    job = validate(JobSpec(target="cluster", cluster="c", image="busybox", output_dir=out), project=PROJECT,
                   region=None, zone=None)
    assert job.spec.output_dir == out


@pytest.mark.parametrize("account", ["trainer@test-proj.iam.gserviceaccount.com",
                                     "123456789012-compute@developer.gserviceaccount.com",
                                     "test-proj@appspot.gserviceaccount.com",
                                     "sa@my-proj.example.com.iam.gserviceaccount.com"])
def test_service_account_addresses_google_issues_are_accepted(account):
    request = vertex_request(machine_type="a3-highgpu-8g", image="busybox", service_account=account)
    assert request["customJob"]["jobSpec"]["serviceAccount"] == account


def test_a_command_in_a_spec_file_is_split_like_a_shell_and_an_unbalanced_one_refused(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("cluster: c\nimage: busybox\ncommand: \"sh -c 'echo hi there'\"\n")
    assert JobSpec.from_sources(str(good), {}).command == ["sh", "-c", "echo hi there"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c\ncommand: \"sh -c 'echo\"\n")
    with pytest.raises(UsageProblem, match="command .*no closing quotation"):
        JobSpec.from_sources(str(bad), {})


def test_no_numa_binding_leaves_the_ranks_unbound_through_the_jobs_environment(gcp):
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g",
                                       "--no-numa-binding", "--env", "B=2", "--dry-run", "--", *TRAINER])
    assert result.exit_code == 0, result.output
    env = env_of(yaml.safe_load(result.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"][0])
    assert env["GCPGPU_NUMA_BINDING"] == "0" and env["B"] == "2"  # the image's entrypoint reads it
