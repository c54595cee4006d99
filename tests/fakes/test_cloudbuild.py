"""The emulator's Cloud Build, through the real google-cloud-build client over gRPC."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.devtools import cloudbuild_v1 as cb

from gcpgpu.fakes.cloudbuild.backend import DEFAULT_SECONDS, SIMULATED
from gcpgpu.fakes.cloudbuild.service import READ_LOG
from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients

PROJECT = "emu-test-project"
PARENT = f"projects/{PROJECT}/locations/us-central1"
IMAGE = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:t1"
S = cb.Build.Status


@pytest.fixture
def clients(gcp: Emulator) -> Clients:
    return Clients(emulator=gcp.address, project=PROJECT)


@pytest.fixture
def client(clients: Clients) -> cb.CloudBuildClient:
    return clients.cloudbuild()


def docker_build(image: str = IMAGE, dockerfile: str = "containers/Dockerfile", **source: str) -> cb.Build:
    build = cb.Build(
        steps=[cb.BuildStep(name="gcr.io/cloud-builders/docker", args=["build", "-f", dockerfile, "-t", image, "."])],
        images=[image],
    )
    if source:
        build.source = cb.Source(storage_source=cb.StorageSource(**source))
    return build


def tarball(*names: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return gzip.compress(raw.getvalue())


def put(clients: Clients, bucket: str, name: str, data: bytes) -> None:
    """Upload a source object to the emulator's Cloud Storage, as gcloud builds submit does."""
    storage = clients.storage()
    if storage.lookup_bucket(bucket) is None:
        storage.create_bucket(bucket)
    storage.bucket(bucket).blob(name).upload_from_string(data)


def read_log(client: cb.CloudBuildClient, build_id: str, offset: int = 0) -> dict:
    call = client.transport.grpc_channel.unary_unary(READ_LOG, request_serializer=lambda b: b,
                                                     response_deserializer=json.loads)
    return call(json.dumps({"project": PROJECT, "id": build_id, "offset": offset}).encode())


def create(client: cb.CloudBuildClient, build: cb.Build, parent: str = PARENT):
    return client.create_build(request=cb.CreateBuildRequest(parent=parent, project_id=PROJECT, build=build))


def get(client: cb.CloudBuildClient, build_id: str) -> cb.Build:
    return client.get_build(project_id=PROJECT, id=build_id)


# --- create, status over time, outcome ----------------------------------------------------------------


def test_create_returns_an_operation_holding_the_queued_build(gcp, client):
    gcp.clock.freeze()
    op = create(client, docker_build())
    build = op.metadata.build
    assert build.status == S.QUEUED and build.id
    assert build.project_id == PROJECT
    assert build.name.endswith(f"/locations/us-central1/builds/{build.id}")
    assert build.log_url.startswith("https://console.cloud.google.com/cloud-build/builds")
    assert build.logs_bucket.startswith("gs://") and build.timeout.total_seconds() == 600
    assert op.operation.name.startswith(f"operations/build/{PROJECT}/")
    assert not op.done()


def test_status_goes_queued_working_success_with_time(gcp, client):
    gcp.clock.freeze()
    build_id = create(client, docker_build()).metadata.build.id
    assert get(client, build_id).status == S.QUEUED
    gcp.clock.advance(DEFAULT_SECONDS * 0.5)
    working = get(client, build_id)
    assert working.status == S.WORKING and working.start_time
    gcp.clock.advance(DEFAULT_SECONDS)
    done = get(client, build_id)
    assert done.status == S.SUCCESS
    assert done.finish_time >= done.start_time
    assert done.status_detail == SIMULATED
    assert [i.name for i in done.results.images] == [IMAGE]
    assert done.results.images[0].digest.startswith("sha256:")
    assert any("no Docker ran" in w.text for w in done.warnings)


def test_operation_result_returns_the_finished_build(gcp, client):
    gcp.faults.operation_seconds = 0.3
    op = create(client, docker_build())
    build = op.result(timeout=10)
    assert build.status == S.SUCCESS and build.id == op.metadata.build.id


def test_a_failed_build_fails_its_operation(gcp, client):
    gcp.faults.operation_seconds = 0.2
    op = create(client, docker_build(bucket="b-src", object_="missing.tgz"))
    with pytest.raises(exceptions.GoogleAPICallError, match="Build FAILURE"):
        op.result(timeout=10)


# --- what can be checked without Docker ------------------------------------------------------------------


def test_missing_source_object_fails_at_fetch(gcp, client):
    gcp.clock.freeze()
    build_id = create(client, docker_build(bucket="b-src", object_="nope.tgz")).metadata.build.id
    gcp.clock.advance(60)
    build = get(client, build_id)
    assert build.status == S.FAILURE
    assert build.failure_info.type_ == cb.Build.FailureInfo.FailureType.FETCH_SOURCE_FAILED
    assert "gs://b-src/nope.tgz not found" in build.status_detail


def test_a_dockerfile_missing_from_the_source_fails_the_step(gcp, client, clients):
    put(clients, "b-src", "ctx.tgz", tarball("pyproject.toml", "Dockerfile"))
    gcp.clock.freeze()
    build_id = create(client, docker_build(bucket="b-src", object_="ctx.tgz")).metadata.build.id
    gcp.clock.advance(60)
    build = get(client, build_id)
    assert build.status == S.FAILURE
    assert build.failure_info.type_ == cb.Build.FailureInfo.FailureType.USER_BUILD_STEP
    assert "lstat /workspace/containers/Dockerfile: no such file or directory" in build.status_detail


def test_source_with_the_dockerfile_succeeds(gcp, client, clients):
    put(clients, "b-src", "ctx.tgz", tarball("containers/Dockerfile", "gcpgpu/__init__.py"))
    gcp.clock.freeze()
    build_id = create(client, docker_build(bucket="b-src", object_="ctx.tgz")).metadata.build.id
    gcp.clock.advance(60)
    assert get(client, build_id).status == S.SUCCESS
    assert "the source holds 2 files" in read_log(client, build_id)["text"]


def test_an_image_no_step_tags_fails_the_push(gcp, client):
    build = docker_build()
    build.images.append(f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/other:1")
    gcp.clock.freeze()
    build_id = create(client, build).metadata.build.id
    gcp.clock.advance(60)
    done = get(client, build_id)
    assert done.status == S.FAILURE
    assert done.failure_info.type_ == cb.Build.FailureInfo.FailureType.PUSH_IMAGE_NOT_FOUND


def test_substitutions_expand_in_images_and_args(gcp, client):
    image = "us-central1-docker.pkg.dev/$PROJECT_ID/gcpgpu/x:${_TAG}"
    build = docker_build(image=image)
    build.substitutions = {"_TAG": "v7"}
    gcp.clock.freeze()
    build_id = create(client, build).metadata.build.id
    gcp.clock.advance(60)
    assert [i.name for i in get(client, build_id).results.images] == [
        f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/x:v7"
    ]


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (cb.Build(images=[IMAGE]), "at least one step"),
        (cb.Build(steps=[cb.BuildStep(args=["build"])]), "build step 0 must specify name"),
        (cb.Build(steps=[cb.BuildStep(name="x")], images=["Not An Image"]), "invalid image name 'Not An Image'"),
        (
            cb.Build(steps=[cb.BuildStep(name="x")], images=["us-central1-docker.pkg.dev/p/img:1"]),
            "LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE",
        ),
        (cb.Build(steps=[cb.BuildStep(name="x")], substitutions={"tag": "1"}), "key 'tag' is not a valid built-in"),
        (cb.Build(steps=[cb.BuildStep(name="x", wait_for=["setup"])]), "unknown step 'setup'"),
        (
            cb.Build(steps=[cb.BuildStep(name="x", id="a"), cb.BuildStep(name="y", id="a")]),
            "repeats id 'a'",
        ),
    ],
)
def test_invalid_builds_are_refused_like_the_service(client, build, words):
    with pytest.raises(exceptions.InvalidArgument, match=words):
        create(client, build)


def test_parent_and_project_must_agree(client):
    with pytest.raises(exceptions.InvalidArgument, match="does not match parent"):
        create(client, docker_build(), parent="projects/someone-else/locations/us-central1")
    with pytest.raises(exceptions.InvalidArgument, match="invalid project ID"):
        client.create_build(project_id="Bad_Project", build=docker_build())


# --- get, list, cancel -------------------------------------------------------------------------------------


def test_get_by_name_and_not_found(client):
    build = create(client, docker_build()).metadata.build
    assert client.get_build(request={"name": build.name}).id == build.id
    with pytest.raises(exceptions.NotFound):
        get(client, "00000000-0000-0000-0000-000000000000")
    with pytest.raises(exceptions.NotFound):  # another project's build is not yours to see
        client.get_build(project_id="other-project-1", id=build.id)


def test_list_newest_first_with_filter_and_pages(gcp, client):
    gcp.clock.freeze()
    ids = []
    for _ in range(3):
        ids.append(create(client, docker_build()).metadata.build.id)
        gcp.clock.advance(1)
    listed = [b.id for b in client.list_builds(request={"parent": PARENT, "project_id": PROJECT})]
    assert listed == ids[::-1]
    gcp.clock.advance(60)
    client.cancel_build(project_id=PROJECT, id=create(client, docker_build()).metadata.build.id)
    done = client.list_builds(request={"parent": PARENT, "project_id": PROJECT, "filter": 'status="SUCCESS"'})
    assert sorted(b.id for b in done) == sorted(ids)
    page = client.list_builds(request={"parent": PARENT, "project_id": PROJECT, "page_size": 2})
    assert len(list(page)) == 4  # the pager follows next_page_token
    assert len(page._response.builds) == 2  # noqa: SLF001 - one page of two
    assert list(client.list_builds(project_id="other-project-1")) == []


def test_cancel_stops_a_running_build_but_not_a_finished_one(gcp, client):
    gcp.clock.freeze()
    build_id = create(client, docker_build()).metadata.build.id
    gcp.clock.advance(DEFAULT_SECONDS * 0.5)
    cancelled = client.cancel_build(project_id=PROJECT, id=build_id)
    assert cancelled.status == S.CANCELLED and cancelled.finish_time
    gcp.clock.advance(60)
    assert get(client, build_id).status == S.CANCELLED
    assert read_log(client, build_id)["text"].rstrip().endswith("ERROR: build cancelled")
    other = create(client, docker_build()).metadata.build.id
    gcp.clock.advance(60)
    assert client.cancel_build(project_id=PROJECT, id=other).status == S.SUCCESS


# --- logs, faults, reset -----------------------------------------------------------------------------------


def test_log_grows_as_the_build_goes_and_says_it_is_simulated(gcp, client):
    gcp.clock.freeze()
    build_id = create(client, docker_build()).metadata.build.id
    assert read_log(client, build_id) == {"text": "", "offset": 0, "done": False}
    gcp.clock.advance(DEFAULT_SECONDS * 0.5)
    first = read_log(client, build_id)
    assert first["text"].startswith(f'starting build "{build_id}"') and not first["done"]
    gcp.clock.advance(60)
    rest = read_log(client, build_id, first["offset"])
    assert rest["done"] and rest["text"]
    whole = first["text"] + rest["text"]
    assert "[emulator] would run gcr.io/cloud-builders/docker build" in whole
    assert "DONE" in whole and SIMULATED in whole


def test_injected_errors_and_the_request_log(gcp, client):
    create(client, docker_build())
    calls = gcp.requests.all(api="cloudbuild")
    assert [(c.method, c.path, c.status) for c in calls] == [
        ("POST", "/google.devtools.cloudbuild.v1.CloudBuild/CreateBuild", 200)
    ]
    gcp.faults.update({"error_rate": 1.0, "error_codes": [503]})
    with pytest.raises(exceptions.ServiceUnavailable):
        create(client, docker_build())
    assert gcp.requests.all(api="cloudbuild")[-1].status == 503


def test_reset_forgets_builds_and_objects(gcp, client, clients):
    put(clients, "b-src", "ctx.tgz", b"data")
    build_id = create(client, docker_build()).metadata.build.id
    gcp.reset()
    with pytest.raises(exceptions.NotFound):
        get(client, build_id)
    assert gcp.storage.read_bytes("b-src", "ctx.tgz") is None


@pytest.mark.parametrize("alone", [True, False], ids=["cloudbuild-only", "as-registered"])
def test_operations_of_other_emulated_apis_are_handed_on(monkeypatch, alone):
    from google.longrunning import operations_pb2

    from gcpgpu.fakes import server
    from gcpgpu.fakes.cloudbuild.service import GET_OPERATION, MINE

    if alone:
        monkeypatch.setattr(server, "GRPC_SERVICES", [MINE])

    class OtherApi(grpc.GenericRpcHandler):
        """Another emulated API with long-running operations, registered after Cloud Build."""

        def service(self, details):
            if details.method != GET_OPERATION:
                return None

            def get_operation(request, context):
                if not request.name.startswith("projects/"):
                    context.abort(grpc.StatusCode.NOT_FOUND, f"no operation {request.name}")
                return operations_pb2.Operation(name=request.name, done=True)

            return grpc.unary_unary_rpc_method_handler(
                get_operation,
                request_deserializer=operations_pb2.GetOperationRequest.FromString,
                response_serializer=operations_pb2.Operation.SerializeToString,
            )

    monkeypatch.setattr(server, "GRPC_SERVICE_FACTORIES", [lambda emulator: OtherApi()])
    emu = Emulator().start()
    try:
        channel = grpc.insecure_channel(emu.info()["grpc"])
        get = channel.unary_unary(
            GET_OPERATION,
            request_serializer=operations_pb2.GetOperationRequest.SerializeToString,
            response_deserializer=operations_pb2.Operation.FromString,
        )
        theirs = get(operations_pb2.GetOperationRequest(name="projects/p/locations/l/operations/7"))
        assert theirs.done and theirs.name.endswith("/operations/7")
        client = Clients(emulator=emu.address, project=PROJECT).cloudbuild()
        emu.faults.operation_seconds = 0.1
        assert create(client, docker_build()).result(timeout=10).status == S.SUCCESS  # ours still ours
        with pytest.raises(grpc.RpcError) as err:
            get(operations_pb2.GetOperationRequest(name="operations/build/nobody/xyz"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        emu.stop()


def test_the_whole_log_is_there_when_the_build_ends_however_long_the_source_took(gcp, client, clients):
    """The log's times count from the build's creation: a slow read of a big source (a loaded machine)
    once timed them later than the end, and a client saw SUCCESS before the log's last lines."""
    put(clients, "b-src", "ctx.tgz", tarball("containers/Dockerfile"))
    gcp.clock.freeze()
    read = gcp.cloudbuild.storage.read_bytes

    def slow_read(*args):
        gcp.clock.advance(DEFAULT_SECONDS)  # the read itself takes as long as the whole build
        return read(*args)

    gcp.cloudbuild.storage.read_bytes = slow_read
    try:
        build_id = create(client, docker_build(bucket="b-src", object_="ctx.tgz")).metadata.build.id
    finally:
        gcp.cloudbuild.storage.read_bytes = read
    assert get(client, build_id).status == S.SUCCESS
    assert read_log(client, build_id)["text"].rstrip().endswith(SIMULATED)
