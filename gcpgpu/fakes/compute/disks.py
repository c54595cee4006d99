"""Standalone zonal disks (disks.insert, update), and attaching them to VMs (instances.attachDisk, detachDisk,
or a VM created with disks[].source): Hyperdisk ML's read-only sharing above all.

A disk's users are derived from the VMs that name it (none is stored on the disk), so a VM's deletion
frees its disks with nothing to update. The rules, per the disk's accessMode (Compute's Disk.AccessMode:
"only valid for Hyperdisk disk types"):
- READ_WRITE_SINGLE (the default): one VM at a time; a second one is refused with Compute's in-use error.
  A Persistent Disk may instead go read-only to many VMs while none has it read-write.
- READ_ONLY_MANY (Hyperdisk ML only here): any number of VMs up to HDML_MAX_VMS, each READ_ONLY.
- READ_WRITE_MANY (Hyperdisk Balanced's multi-writer): many VMs read-write.
The access mode changes (disks.update) only while no VM has the disk.

Read in Google's docs through search, NOT verified against the service: Hyperdisk ML's size (4 GiB to
64 TiB, 100 GiB by default) and throughput (400 to 1,200,000 MiB/s); that it cannot be a boot disk; the
2,500 VMs one volume may be attached to (a copy of Google's release notes); the wording of the
refusals below other than the in-use one (Compute's own, as crud.py writes it).
"""

from __future__ import annotations

from ..core import ApiError, check_name, invalid, not_found, required
from .state import Project, _mutation, last

PD_TYPES = ("pd-standard", "pd-balanced", "pd-ssd", "pd-extreme")
HYPERDISK_TYPES = ("hyperdisk-balanced", "hyperdisk-extreme", "hyperdisk-throughput", "hyperdisk-ml")
HDML = "hyperdisk-ml"
HDML_SIZE_GB = (4, 65536)
HDML_THROUGHPUT = (400, 1_200_000)
HDML_MAX_VMS = 2500
ACCESS_MODES = ("READ_WRITE_SINGLE", "READ_ONLY_MANY", "READ_WRITE_MANY")


def _int(value, field: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise invalid(field, value, "Must be an integer.") from None


class DisksMixin:
    @_mutation()
    def insert_disk(self, p: Project, zone: str, body: dict) -> dict:
        self._check_zone(zone)
        check_name("resource.name", body.get("name"))
        kind = last(body.get("type") or "pd-standard")
        if kind not in PD_TYPES + HYPERDISK_TYPES:
            raise invalid("resource.type", body.get("type"), f"Unknown disk type; one of {', '.join(PD_TYPES + HYPERDISK_TYPES)}.")
        size = _int(body.get("sizeGb") or (100 if kind == HDML else 10), "resource.sizeGb")
        disk = {"kind": "compute#disk", "name": body["name"], "description": body.get("description", ""),
                "sizeGb": str(size), "zone": self.link(p.name, f"zones/{zone}"),
                "type": self.link(p.name, f"zones/{zone}/diskTypes/{kind}"), "status": "READY",
                "labels": body.get("labels") or {}}
        access = body.get("accessMode") or "READ_WRITE_SINGLE"
        self._check_access(kind, access, "resource.accessMode")
        if kind.startswith("hyperdisk"):
            disk["accessMode"] = access
        if kind == HDML:
            lo, hi = HDML_SIZE_GB
            if not lo <= size <= hi:
                raise invalid("resource.sizeGb", size, f"A {HDML} disk is {lo} GB to {hi} GB.")
            throughput = _int(body.get("provisionedThroughput") or HDML_THROUGHPUT[0], "resource.provisionedThroughput")
            if not HDML_THROUGHPUT[0] <= throughput <= HDML_THROUGHPUT[1]:
                raise invalid("resource.provisionedThroughput", throughput,
                              f"A {HDML} disk's throughput is {HDML_THROUGHPUT[0]} to {HDML_THROUGHPUT[1]} MiB/s.")
            disk["provisionedThroughput"] = str(throughput)
        return self._insert(p, f"zones/{zone}/disks", f"zones/{zone}", disk)

    @staticmethod
    def _check_access(kind: str, access: str, field: str) -> None:
        if access not in ACCESS_MODES:
            raise invalid(field, access, f"One of {', '.join(ACCESS_MODES)}.")
        if access != "READ_WRITE_SINGLE" and not kind.startswith("hyperdisk"):
            raise invalid(field, access, "The AccessMode is only valid for Hyperdisk disk types.")
        if access == "READ_ONLY_MANY" and kind != HDML:
            raise invalid(field, access, f"READ_ONLY_MANY is for {HDML} disks.")
        if access == "READ_WRITE_MANY" and kind != "hyperdisk-balanced":
            raise invalid(field, access, "READ_WRITE_MANY is for hyperdisk-balanced disks.")

    @_mutation()
    def update_disk(self, p: Project, zone: str, name: str, body: dict) -> dict:
        """disks.update: accessMode (only while no VM has the disk) and provisionedThroughput."""
        self._check_zone(zone)
        disk = self._get(p.name, f"zones/{zone}/disks", name)
        kind = last(disk["type"])
        access = body.get("accessMode")
        if access and access != disk.get("accessMode"):
            self._check_access(kind, access, "resource.accessMode")
            users = self.disk_users(p, disk["selfLink"])
            if users:
                raise ApiError(400, "invalid", f"The access mode of disk '{name}' can change only while it is attached "
                               f"to no instance; it is attached to {', '.join(last(u) for u, _ in users)}.")
            disk["accessMode"] = access
        if body.get("provisionedThroughput") and kind == HDML:
            disk["provisionedThroughput"] = str(_int(body["provisionedThroughput"], "resource.provisionedThroughput"))
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "update", disk["selfLink"], disk["id"]))

    def disk_users(self, p: Project, link: str) -> list[tuple[str, str]]:
        """(VM link, mode) of every VM (not deleted by now) that has the disk `link` attached."""
        out = []
        for _path, inst in p.iter_kind("instances"):
            if inst.get("_gone_at") is not None and inst["_gone_at"] <= self.now():
                continue
            out += [(inst["selfLink"], d.get("mode", "READ_WRITE")) for d in inst.get("disks", [])
                    if d.get("source") == link]
        return out

    def _disk_for(self, p: Project, zone: str, source: str, field: str) -> dict:
        """The disk a source names (a URL, a partial path or a bare name), in the VM's zone."""
        name = last(source)
        if not source or "/disks/" not in f"/{source}" and "/" in source:
            raise invalid(field, source, "The URL is malformed.")
        if "/zones/" in f"/{source}" and f"zones/{zone}/disks/" not in source:
            raise invalid(field, source, f"A disk attaches only to VMs in its own zone ({zone}).")
        disk = p.coll(f"zones/{zone}/disks").get(name)
        if disk is None:
            raise not_found(f"projects/{p.name}/zones/{zone}/disks/{name}")
        return disk

    def check_attach(self, p: Project, disk: dict, inst_link: str, mode: str, field: str) -> None:
        """Refuse attaching `disk` to the VM `inst_link` in `mode` where its access mode does not allow it."""
        if mode not in ("READ_WRITE", "READ_ONLY"):
            raise invalid(f"{field}.mode", mode, "One of READ_WRITE, READ_ONLY.")
        users = [(u, m) for u, m in self.disk_users(p, disk["selfLink"]) if u != inst_link]
        access = disk.get("accessMode", "READ_WRITE_SINGLE")
        if access == "READ_ONLY_MANY":
            if mode != "READ_ONLY":
                raise invalid(f"{field}.mode", mode, f"Disk '{disk['name']}' is READ_ONLY_MANY: it attaches READ_ONLY.")
            if len(users) >= HDML_MAX_VMS:
                raise invalid(f"{field}.source", disk["name"],
                              f"A {HDML} disk attaches to at most {HDML_MAX_VMS} instances.")
            return
        if access == "READ_WRITE_MANY" or not users:
            return
        if not last(disk["type"]).startswith("hyperdisk") and mode == "READ_ONLY" and \
                all(m == "READ_ONLY" for _u, m in users):
            return  # a Persistent Disk shared read-only
        where = disk["selfLink"].split("/compute/v1/")[1]
        raise ApiError(400, "resourceInUseByAnotherResource",
                       f"The disk resource '{where}' is already being used by '{users[0][0].split('/compute/v1/')[1]}'")

    def attached_disk(self, p: Project, zone: str, inst_link: str, d: dict, index: int, field: str) -> dict:
        """The attachedDisk a VM stores for an existing disk (disks[].source, instances.attachDisk), checked."""
        disk = self._disk_for(p, zone, d.get("source") or "", f"{field}.source")
        if d.get("boot") and last(disk["type"]) == HDML:
            raise invalid(f"{field}.boot", True, f"A {HDML} disk cannot be a boot disk.")
        mode = d.get("mode") or "READ_WRITE"
        self.check_attach(p, disk, inst_link, mode, field)
        return {"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": mode, "boot": bool(d.get("boot")),
                "autoDelete": bool(d.get("autoDelete", False)), "index": index,
                "deviceName": d.get("deviceName") or disk["name"], "diskSizeGb": disk["sizeGb"],
                "interface": d.get("interface", "NVME" if last(disk["type"]).startswith("hyperdisk") else "SCSI"),
                "source": disk["selfLink"]}

    @_mutation()
    def attach_disk(self, p: Project, zone: str, name: str, body: dict) -> dict:
        self._check_zone(zone)
        inst = self._get(p.name, f"zones/{zone}/instances", name)
        if not body.get("source"):
            raise required("resource.source")
        stored = self.attached_disk(p, zone, inst["selfLink"], body, len(inst["disks"]), "resource")
        if any(d["deviceName"] == stored["deviceName"] for d in inst["disks"]):
            raise invalid("resource.deviceName", stored["deviceName"], "A disk with this device name is attached already.")
        if any(d["source"] == stored["source"] for d in inst["disks"]):
            raise invalid("resource.source", body["source"], "The disk is attached to this instance already.")
        inst["disks"].append(stored)
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "attachDisk", inst["selfLink"], inst["id"]))

    @_mutation()
    def detach_disk(self, p: Project, zone: str, name: str, device_name: str) -> dict:
        self._check_zone(zone)
        inst = self._get(p.name, f"zones/{zone}/instances", name)
        keep = [d for d in inst["disks"] if d.get("deviceName") != device_name]
        if len(keep) == len(inst["disks"]):
            raise invalid("deviceName", device_name, f"No attached disk found with device name '{device_name}'.")
        inst["disks"] = keep
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "detachDisk", inst["selfLink"], inst["id"]))
