"""Standalone disks and Hyperdisk ML's sharing through Google's Compute client: one writer at a time in
READ_WRITE_SINGLE, read-only on many VMs in READ_ONLY_MANY (up to the documented count), the access mode
changed only while detached, and Compute's in-use error where a disk is taken."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from .builders import PROJECT, ZONE, insert, vm

HDML = f"zones/{ZONE}/diskTypes/hyperdisk-ml"


@pytest.fixture
def disks(compute):
    return compute("DisksClient")


def _disk(disks, name: str = "data", kind: str = HDML, access: str | None = None, **kw) -> None:
    body = compute_v1.Disk(name=name, type_=kind, **kw)
    if access:
        body.access_mode = access
    disks.insert(project=PROJECT, zone=ZONE, disk_resource=body).result()


def _attach(instances, vm_name: str, disk: str = "data", mode: str = "READ_WRITE") -> None:
    instances.attach_disk(project=PROJECT, zone=ZONE, instance=vm_name, attached_disk_resource=compute_v1.AttachedDisk(
        source=f"zones/{ZONE}/disks/{disk}", mode=mode)).result()


def _access(disks, mode: str, disk: str = "data") -> None:
    disks.update(request=compute_v1.UpdateDiskRequest(project=PROJECT, zone=ZONE, disk=disk, update_mask="accessMode",
                                                      disk_resource=compute_v1.Disk(access_mode=mode))).result()


def test_a_single_writer_disk_on_a_second_vm_fails_as_compute_does(disks, instances):
    _disk(disks, size_gb=100)
    for name in ("a", "b"):
        insert(instances, vm(name))
    _attach(instances, "a")
    got = disks.get(project=PROJECT, zone=ZONE, disk="data")
    assert got.access_mode == "READ_WRITE_SINGLE" and [u.rsplit("/", 1)[1] for u in got.users] == ["a"]
    for mode in ("READ_WRITE", "READ_ONLY"):
        with pytest.raises(exceptions.BadRequest, match="is already being used by 'projects/.*/instances/a'"):
            _attach(instances, "b", mode=mode)
    with pytest.raises(exceptions.BadRequest, match="is already being used"):
        disks.delete(project=PROJECT, zone=ZONE, disk="data").result()
    with pytest.raises(exceptions.BadRequest, match="attached to no instance"):
        _access(disks, "READ_ONLY_MANY")
    instances.detach_disk(project=PROJECT, zone=ZONE, instance="a", device_name="data").result()
    assert not disks.get(project=PROJECT, zone=ZONE, disk="data").users
    _attach(instances, "b")  # free again: the next writer takes it


def test_read_only_many_attaches_read_only_to_many_vms_and_no_further_than_the_limit(disks, instances, monkeypatch):
    from gcpgpu.fakes.compute import disks as hdml

    _disk(disks, access="READ_ONLY_MANY")
    for name in ("a", "b"):
        insert(instances, vm(name))
    _attach(instances, "a", mode="READ_ONLY")
    _attach(instances, "b", mode="READ_ONLY")
    # A VM made with the disk attached (disks[].source), as cluster up would make a node.
    body = vm("c")
    body.disks.append(compute_v1.AttachedDisk(source=f"zones/{ZONE}/disks/data", mode="READ_ONLY", boot=False))
    insert(instances, body)
    assert len(disks.get(project=PROJECT, zone=ZONE, disk="data").users) == 3
    insert(instances, vm("d"))
    with pytest.raises(exceptions.BadRequest, match="attaches READ_ONLY"):
        _attach(instances, "d", mode="READ_WRITE")
    monkeypatch.setattr(hdml, "HDML_MAX_VMS", 3)  # the documented 2,500, made reachable
    with pytest.raises(exceptions.BadRequest, match="at most 3 instances"):
        _attach(instances, "d", mode="READ_ONLY")
    instances.delete(project=PROJECT, zone=ZONE, instance="c").result()  # a deleted VM frees its place
    _attach(instances, "d", mode="READ_ONLY")


@pytest.mark.parametrize("kw,said", [
    ({"size_gb": 2}, "sizeGb"),
    ({"size_gb": 100, "provisioned_throughput": 100}, "provisionedThroughput"),
    ({"type_": f"zones/{ZONE}/diskTypes/pd-balanced", "access": "READ_ONLY_MANY"}, "only valid for Hyperdisk"),
    ({"type_": f"zones/{ZONE}/diskTypes/hyperdisk-balanced", "access": "READ_ONLY_MANY"}, "READ_ONLY_MANY is for"),
    ({"type_": f"zones/{ZONE}/diskTypes/floppy"}, "Unknown disk type"),
])
def test_bad_disks_are_refused_before_anything_is_made(disks, kw, said):
    access = kw.pop("access", None)
    kind = kw.pop("type_", HDML)
    with pytest.raises(exceptions.BadRequest, match=said):
        _disk(disks, kind=kind, access=access, **kw)
    assert list(disks.list(project=PROJECT, zone=ZONE)) == []


def test_hyperdisk_ml_is_no_boot_disk(disks, instances):
    _disk(disks)
    body = vm("a")
    body.disks = [compute_v1.AttachedDisk(source=f"zones/{ZONE}/disks/data", boot=True)]
    with pytest.raises(exceptions.BadRequest, match="cannot be a boot disk"):
        insert(instances, body)
