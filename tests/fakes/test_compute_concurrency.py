"""Many clients at once: parallel inserts, optimistic locking with label fingerprints, requestId
idempotency, and quota that is never oversubscribed."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from google.api_core import exceptions
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator

from .builders import PROJECT, REGION, ZONE, gpu_vm, insert, vm


def _insert_with_id(instances, body: compute_v1.Instance, request_id: str):
    # The flattened arguments have no request_id; the request object does.
    return instances.insert(request={"project": PROJECT, "zone": ZONE, "instance_resource": body, "request_id": request_id})


def test_fifty_parallel_inserts(gcp: Emulator, instances) -> None:
    names = [f"par-{i:02d}" for i in range(50)]
    start = threading.Barrier(len(names))

    def one(name: str) -> str:
        start.wait()
        op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm(name))
        op.result()
        return op.name

    with ThreadPoolExecutor(len(names)) as pool:
        op_names = list(pool.map(one, names))
    assert len(set(op_names)) == 50
    got = list(instances.list(project=PROJECT, zone=ZONE))
    assert sorted(i.name for i in got) == names
    assert len({i.id for i in got}) == 50
    assert len({i.network_interfaces[0].network_i_p for i in got}) == 50  # no address handed out twice
    assert len(gcp.requests.all(method="POST")) == 50


def test_parallel_set_labels_lose_no_update(instances) -> None:
    """Each writer adds its own label by read-modify-write; a stale fingerprint gets 412 and retries."""
    insert(instances, vm("contended"))
    writers = 8
    attempts: list[tuple[str, bool]] = []
    lock = threading.Lock()
    start = threading.Barrier(writers)

    def writer(k: int) -> None:
        start.wait()
        while True:
            cur = instances.get(project=PROJECT, zone=ZONE, instance="contended")
            labels = {**cur.labels, f"w{k}": "1"}
            try:
                instances.set_labels(project=PROJECT, zone=ZONE, instance="contended",
                                     instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                                         labels=labels, label_fingerprint=cur.label_fingerprint))
            except exceptions.PreconditionFailed:
                with lock:
                    attempts.append((cur.label_fingerprint, False))
                continue
            with lock:
                attempts.append((cur.label_fingerprint, True))
            return

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(writer, range(writers)))
    final = instances.get(project=PROJECT, zone=ZONE, instance="contended").labels
    assert final == {f"w{k}": "1" for k in range(writers)}  # no lost update
    wins = Counter(fp for fp, ok in attempts if ok)
    assert all(n == 1 for n in wins.values())  # exactly one winner per fingerprint
    assert len(wins) == writers
    assert any(not ok for _, ok in attempts), "the writers never collided; the test proved nothing"


def test_same_request_id_twice_makes_one_vm(gcp: Emulator, instances) -> None:
    rid = str(uuid.uuid4())
    first = _insert_with_id(instances, vm("once"), rid)
    again = _insert_with_id(instances, vm("once"), rid)
    assert again.name == first.name
    assert all(f"requestId={rid}" in r.query for r in gcp.requests.all(method="POST"))
    assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == ["once"]
    # Without the requestId, the retry is a second insert and collides.
    try:
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("once"))
        raise AssertionError("a second insert without requestId should conflict")
    except exceptions.Conflict:
        pass


def test_concurrent_retries_with_one_request_id(instances) -> None:
    rid = str(uuid.uuid4())
    start = threading.Barrier(10)

    def one(_: int) -> str:
        start.wait()
        return _insert_with_id(instances, vm("racy"), rid).name

    with ThreadPoolExecutor(10) as pool:
        ops = set(pool.map(one, range(10)))
    assert len(ops) == 1
    assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == ["racy"]


def test_request_id_on_delete_and_failed_operation(gcp: Emulator, instances) -> None:
    insert(instances, vm("gone"))
    rid = str(uuid.uuid4())
    first = instances.delete(request={"project": PROJECT, "zone": ZONE, "instance": "gone", "request_id": rid})
    first.result()
    # The VM is gone, yet the retried delete answers with the first operation rather than 404.
    assert instances.delete(request={"project": PROJECT, "zone": ZONE, "instance": "gone", "request_id": rid}).name == first.name
    gcp.faults.stockout(ZONE, "a2-highgpu-1g")
    rid = str(uuid.uuid4())
    failed = _insert_with_id(instances, gpu_vm("nope"), rid)
    assert _insert_with_id(instances, gpu_vm("nope"), rid).name == failed.name


def test_parallel_inserts_never_oversubscribe_quota(gcp: Emulator, instances) -> None:
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 5)
    start = threading.Barrier(20)

    def one(i: int) -> bool:
        start.wait()
        try:
            insert(instances, gpu_vm(f"q-{i}"))
            return True
        except exceptions.Forbidden:
            return False

    with ThreadPoolExecutor(20) as pool:
        ok = list(pool.map(one, range(20)))
    assert ok.count(True) == 5
    assert len(list(instances.list(project=PROJECT, zone=ZONE))) == 5


def test_a_new_project_is_created_once_under_concurrent_first_use(compute, instances) -> None:
    zones = compute("ZonesClient")

    def first_use(project: str) -> None:
        start = threading.Barrier(16)

        def reader() -> None:
            start.wait()
            list(zones.list(project=project))

        def writer(i: int) -> None:
            start.wait()
            instances.insert(project=project, zone=ZONE, instance_resource=vm(f"v-{i}")).result()

        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(reader) for _ in range(8)] + [pool.submit(writer, i) for i in range(8)]
            for f in futures:
                f.result()

    for k in range(4):
        first_use(f"fresh-project-{k}")
        assert len(list(instances.list(project=f"fresh-project-{k}", zone=ZONE))) == 8
