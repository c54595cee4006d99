"""The emulator as a server: state file round trip, control endpoints, mock_gcp(), gRPC services
announced on the info endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from gcpgpu.fakes import server
from gcpgpu.fakes.server import Emulator, mock_gcp
from gcpgpu.gcp.clients import Clients

from .builders import PROJECT, REGION, ZONE, gpu_vm, insert, vm


def _call(emu: Emulator, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{emu.url}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_job_outputs_live_beside_the_state_file_so_they_outlive_a_restart(tmp_path: Path) -> None:
    first = Emulator(state_file=tmp_path / "emu.json")
    (Path(first.jobs.agent.storage.local("gs://bkt/run/", "1")) / "ckpt").mkdir(parents=True)
    second = Emulator(state_file=tmp_path / "emu.json")  # the same server started again
    assert (Path(second.jobs.agent.storage.local("gs://bkt/run/", "1")) / "ckpt").is_dir()
    assert Emulator().jobs.agent.storage.local("gs://bkt/run/", "1") != first.jobs.agent.storage.local("gs://bkt/run/", "1")


def test_state_file_round_trip(tmp_path: Path) -> None:
    state = tmp_path / "emulator-state.json"
    with Emulator(state_file=state) as first:
        c = Clients(emulator=first.address)
        insert(c.compute("InstancesClient"), gpu_vm("kept", labels={"cluster": "c1"}))
        c.compute("ResourcePoliciesClient").insert(project=PROJECT, region=REGION, resource_policy_resource=compute_v1.ResourcePolicy(
            name="kept-policy", group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(vm_count=4))).result()
        first.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 7)
        before = c.compute("InstancesClient").get(project=PROJECT, zone=ZONE, instance="kept")
    assert state.exists()  # stop() saved it

    with Emulator(state_file=state) as second:
        c = Clients(emulator=second.address)
        inst = c.compute("InstancesClient")
        after = inst.get(project=PROJECT, zone=ZONE, instance="kept")
        assert (after.id, after.labels, after.status, after.label_fingerprint) == (
            before.id, before.labels, "RUNNING", before.label_fingerprint)
        pol = c.compute("ResourcePoliciesClient").get(project=PROJECT, region=REGION, resource_policy="kept-policy")
        assert pol.group_placement_policy.vm_count == 4
        assert second.faults.quotas[REGION]["NVIDIA_A100_GPUS"] == 7
        assert second.compute.project(PROJECT).number == first.compute.project(PROJECT).number
        # New resources after a restart get fresh ids, never one a loaded resource holds.
        insert(inst, vm("new-after-restart"))
        snap = second.compute.snapshot()[PROJECT]
        ids = [r["id"] for coll in [*snap["collections"].values(), *snap["operations"].values()] for r in coll.values()]
        assert len(ids) == len(set(ids))


def test_save_while_requests_mutate_state(tmp_path: Path) -> None:
    with Emulator(state_file=tmp_path / "busy.json") as emu:
        inst = Clients(emulator=emu.address).compute("InstancesClient")
        stop = threading.Event()

        def churn() -> None:
            i = 0
            while not stop.is_set():
                insert(inst, vm(f"churn-{threading.get_ident() % 1000}-{i}"))
                i += 1

        threads = [threading.Thread(target=churn) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            statuses = [_call(emu, "POST", "/_emulator/save")[0] for _ in range(20)]
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert statuses == [200] * 20
        saved = json.loads((tmp_path / "busy.json").read_text())
        assert saved["version"] == server.STATE_VERSION and PROJECT in saved["compute"]


def test_a_corrupt_or_foreign_state_file_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "old.json"
    state.write_text(json.dumps({"version": 999, "compute": {}}))
    with pytest.raises(ValueError, match="version"):
        Emulator(state_file=state)


def test_control_endpoints(gcp: Emulator, instances) -> None:
    code, info = _call(gcp, "GET", "/_emulator/info")
    assert code == 200 and info["rest"] == gcp.address
    assert info["apis"]["compute"] == f"http://{gcp.address}/compute/v1/"
    assert "grpc" in info  # where gRPC services listen, or None when none is registered

    code, faults = _call(gcp, "PUT", "/_emulator/faults", {"operation_seconds": 2.5, "latency_ms": 1})
    assert code == 200 and faults["operation_seconds"] == 2.5
    assert gcp.faults.operation_seconds == 2.5 and gcp.faults.latency_ms == 1
    code, faults = _call(gcp, "GET", "/_emulator/faults")
    assert faults["latency_ms"] == 1
    code, err = _call(gcp, "PUT", "/_emulator/faults", {"no_such_knob": 1})
    assert code == 400 and "no_such_knob" in err["error"]["message"]
    _call(gcp, "PUT", "/_emulator/faults", {"operation_seconds": 0, "latency_ms": 0})

    insert(instances, vm("seen"))
    code, logged = _call(gcp, "GET", "/_emulator/requests")
    assert [(r["method"], r["status"]) for r in logged][-1] == ("POST", 200)
    assert any(r["path"].endswith(f"/zones/{ZONE}/instances") for r in logged)
    assert _call(gcp, "DELETE", "/_emulator/requests") == (200, {"cleared": True})
    assert len(gcp.requests) == 0

    assert _call(gcp, "POST", "/_emulator/reset") == (200, {"reset": True})
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="seen")
    code, err = _call(gcp, "GET", "/_emulator/nothing-here")
    assert code == 404 and err["error"]["errors"][0]["reason"] == "notFound"


def test_the_clock_endpoint_sets_the_time_every_process_on_the_published_clock_reads(gcp: Emulator) -> None:
    """POST /_emulator/clock moves the emulator's clock, and the tool's (gcpgpu.gcp.clock, through the file
    the `gcp` fixture names in GCPGPU_CLOCK) moves with it."""
    from gcpgpu.gcp import clock

    code, got = _call(gcp, "GET", "/_emulator/clock")
    assert code == 200 and got["rate"] == 1.0 and got["published"] == os.environ["GCPGPU_CLOCK"]
    assert abs(got["now"] - clock.now()) < 5
    code, got = _call(gcp, "POST", "/_emulator/clock", {"advance": 3600, "rate": 0})
    assert code == 200 and got["rate"] == 0.0
    assert got["now"] == gcp.clock.now() == clock.now()  # stopped, an hour on: the tool reads the same
    for bad in ({"advance": -1}, {"rate": -2}, {"rate": "fast"}, {"at": 0}, [1]):
        code, err = _call(gcp, "POST", "/_emulator/clock", bad)
        assert code == 400 and err["error"]["errors"][0]["reason"] == "invalid", bad
    assert gcp.clock.now() == got["now"]  # a refused request changed nothing


@pytest.mark.parametrize("bad", [{"advance": float("inf")}, {"advance": 1e300}, {"advance": float("nan")},
                                 {"rate": float("inf")}, {"advance": 60, "rate": 1e300}])
def test_the_clock_endpoint_refuses_a_time_no_later_operation_could_reach(gcp: Emulator, bad: dict) -> None:
    """Infinity or 1e300 seconds on left every later `cluster up` waiting for ever (1e300 + 1 == 1e300):
    refused with a 400 naming the field and the range, and the clock left where it was."""
    before = _call(gcp, "POST", "/_emulator/clock", {"rate": 0})[1]["now"]
    code, err = _call(gcp, "POST", "/_emulator/clock", bad)
    field = "rate" if "rate" in bad else "advance"
    assert code == 400, (bad, err)
    assert err["error"]["message"].startswith(field) and "from 0 to" in err["error"]["message"]
    assert gcp.clock.now() == before and gcp.clock.rate == 0.0


def test_save_endpoint_writes_the_state_file(tmp_path: Path) -> None:
    with Emulator(state_file=tmp_path / "s.json") as emu:
        code, body = _call(emu, "POST", "/_emulator/save")
        assert code == 200 and body["saved"] == str(tmp_path / "s.json")
        assert (tmp_path / "s.json").exists()


def test_unknown_api_paths_get_google_shaped_errors(gcp: Emulator) -> None:
    code, err = _call(gcp, "GET", "/bigquery/v2/projects")
    assert code == 404 and err["error"]["status"] == "NOT_FOUND"
    code, err = _call(gcp, "GET", f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/gizmos")
    assert code == 404 and err["error"]["errors"][0]["reason"] == "notFound"
    code, err = _call(gcp, "POST", f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances", None)
    assert code == 400 and err["error"]["code"] == 400
    req = urllib.request.Request(f"{gcp.url}/compute/v1/projects/{PROJECT}/global/networks", data=b"{not json",
                                 method="POST", headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and json.loads(e.value.read())["error"]["errors"][0]["reason"] == "parseError"


def test_mock_gcp_sets_and_restores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCPGPU_EMULATOR", "127.0.0.1:1")
    with mock_gcp() as emu:
        assert os.environ["GCPGPU_EMULATOR"] == emu.address
        assert emu.address.startswith("127.0.0.1:")  # never any other interface
        zones = Clients(emulator=os.environ["GCPGPU_EMULATOR"]).compute("ZonesClient")
        assert zones.get(project=PROJECT, zone=ZONE).name == ZONE
        emu.faults.stockout(ZONE, "a2-highgpu-1g")
    assert os.environ["GCPGPU_EMULATOR"] == "127.0.0.1:1"


def _echo_factory(emu: Emulator) -> grpc.GenericRpcHandler:
    def hello(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"hello " + request + f" from {emu.address}".encode()

    return grpc.method_handlers_generic_handler("gcpgpu.test.Echo", {"Hello": grpc.unary_unary_rpc_method_handler(hello)})


def test_grpc_services_are_served_on_the_announced_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "GRPC_SERVICE_FACTORIES", [_echo_factory])  # restored after the test
    with Emulator() as emu:
        info = Clients(emulator=emu.address).emulator_info
        assert info["grpc"] == f"127.0.0.1:{emu.grpc_port}"
        with grpc.insecure_channel(info["grpc"]) as channel:
            reply = channel.unary_unary("/gcpgpu.test.Echo/Hello")(b"world", timeout=5)
        assert reply == f"hello world from {emu.address}".encode()
    assert server.GRPC_SERVICE_FACTORIES == [_echo_factory]


def test_ids_are_the_same_in_every_process() -> None:
    """Project numbers and catalog ids must not depend on Python's salted hash()."""
    code = ("from gcpgpu.fakes.server import Emulator; e = Emulator(); "
            "print(e.compute.project('stable-proj').number, e.compute.machine_type('stable-proj', 'us-central1-a', "
            "'a2-highgpu-1g')['id'])")
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
