"""The emulator's default world, loaded from data: its regions/zones file plus the tool's catalog.

Reads the catalog YAML directly (as data) rather than importing the tool's catalog module, so the
emulator depends on nothing above it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class MachineTypeInfo:
    name: str
    vcpus: int
    memory_mb: int
    gpu: str | None
    gpu_count: int


@dataclass(frozen=True)
class World:
    regions: dict[str, list[str]]          # region -> zones
    zone_machine_types: dict[str, list[str]]  # zone -> machine type names offered
    machine_types: dict[str, MachineTypeInfo]
    gpus: dict[str, dict]                  # accelerator type -> catalog entry (quota metrics, memory)
    region_quotas: dict[str, float]
    global_quotas: dict[str, float]
    images: dict[str, dict[str, str]]      # image project -> family -> image
    timings: dict[str, float]
    image_patterns: dict[str, list[re.Pattern]] = field(default_factory=dict)  # image project -> families
    image_date: str = "20261101"
    image_names: dict[str, list[re.Pattern]] = field(default_factory=dict)  # image project -> image names

    def image_for_family(self, image_project: str, family: str) -> str | None:
        """The image a public family resolves to: listed, else FAMILY-vDATE where a pattern matches."""
        listed = self.images.get(image_project, {}).get(family)
        if listed:
            return listed
        if any(p.fullmatch(family) for p in self.image_patterns.get(image_project, [])):
            return f"{family}-v{self.image_date}"
        return None

    def family_of_image(self, image_project: str, name: str) -> str | None:
        """The family of a public image ("" when it has none), or None when there is no such image."""
        listed = next((f for f, n in self.images.get(image_project, {}).items() if n == name), None)
        if listed:
            return listed
        m = re.fullmatch(r"(.+)-v(\d{8})", name)
        if m and self.image_for_family(image_project, m.group(1)) == name:
            return m.group(1)
        if any(p.fullmatch(name) for p in self.image_names.get(image_project, [])):
            return ""
        return None
    # machine type -> {"boot_disk_types": [...], "rdma_nics": N (MRDMA NICs it takes), "gvnics": N or None}
    machine_rules: dict[str, dict] = field(default_factory=dict)
    # GPUs N1 VMs attach: name -> {"zones": [...], "limits": {count: (max vCPUs, max GB)}, ...}
    attachable: dict[str, dict] = field(default_factory=dict)

    def region_of(self, zone: str) -> str | None:
        for region, zones in self.regions.items():
            if zone in zones:
                return region
        return None

    def accelerators_in_zone(self, zone: str) -> list[str]:
        names = {self.machine_types[m].gpu for m in self.zone_machine_types.get(zone, [])}
        names |= {g for g, info in self.attachable.items() if zone in info["zones"]}
        return sorted(n for n in names if n)


def read_data(package: str, name: str) -> dict:
    """A YAML data file shipped in `package`, parsed (the catalog and the world are data, not code)."""
    return yaml.load(resources.files(package).joinpath(name).read_text(), Loader=_Loader)


@cache
def default_world() -> World:
    """The world every emulator starts from (cached: it is immutable)."""
    catalog = read_data("gcpgpu", "data/machines.yaml")
    data = read_data("gcpgpu.fakes", "data/world.yaml")
    public = read_data("gcpgpu.fakes", "data/public_images.yaml")  # its header states the rule and its limits
    machine_types = {
        name: MachineTypeInfo(name, int(m["vcpus"]), int(m["memory_mb"]), m["gpu"], int(m["gpu_count"]))
        for name, m in catalog["machine_types"].items()
    }
    general = general_machine_types(data)
    machine_types.update(general)
    regions: dict[str, list[str]] = {}
    zone_types: dict[str, list[str]] = {}
    for region, rdata in catalog["availability"]["regions"].items():
        regions[region] = list(rdata["zones"])
        for zone, patterns in rdata["zones"].items():
            offered = [m for m in catalog["machine_types"] if any(fnmatch.fnmatch(m, p) for p in patterns)]
            zone_types[zone] = offered + list(general)
    attachable = {
        name: {**g, "limits": {int(n): (int(cpus), int(gb)) for n, (cpus, gb) in g["limits"].items()}}
        for name, g in data.get("attachable_gpus", {}).items()
    }
    return World(
        regions=regions,
        zone_machine_types=zone_types,
        machine_types=machine_types,
        gpus={**catalog["gpus"], **attachable},
        attachable=attachable,
        region_quotas={k: float(v) for k, v in data["default_region_quotas"].items()},
        global_quotas={k: float(v) for k, v in data["default_global_quotas"].items()},
        images=data["images"],
        timings={k: float(v) for k, v in data["timings"].items()},
        image_patterns={proj: [re.compile(p) for p in pats] for proj, pats in public["families"].items()},
        image_names={proj: [re.compile(p) for p in pats] for proj, pats in public["images"].items()},
        image_date=str(data.get("image_date", "20261101")),
        machine_rules=_machine_rules(catalog),
    )


def general_machine_types(data: dict) -> dict[str, MachineTypeInfo]:
    """FAMILY-SHAPE-N for each family's rules in world.yaml (memory = N x GB per vCPU), plus the
    shared-core types listed by hand."""
    out = {}
    for family, shapes in data.get("general_machine_families", {}).items():
        for shape, (gb_per_vcpu, sizes) in shapes.items():
            for n in sizes:
                name = f"{family}-{shape}-{n}"
                out[name] = MachineTypeInfo(name, int(n), int(round(n * gb_per_vcpu * 1024)), None, 0)
    for name, m in data.get("general_machine_types", {}).items():
        out[name] = MachineTypeInfo(name, int(m["vcpus"]), int(m["memory_mb"]), None, 0)
    return out


def _machine_rules(catalog: dict) -> dict[str, dict]:
    """What the API checks per GPU machine type: boot disk types, and RDMA NICs (A3 Ultra, A4)."""
    rules = {}
    for name, m in catalog["machine_types"].items():
        fam = {**catalog["families"][m["family"]], **m}
        rdma = fam.get("gpudirect") == "rdma"
        rules[name] = {
            "boot_disk_types": list(catalog.get("nodes", {}).get(m["family"], {}).get("boot_disk_types", [])),
            "rdma_nics": int(fam["gpu_nics"]) if rdma else 0,
            "gvnics": int(fam.get("gvnic_networks", 0)) if rdma else None,
        }
    return rules
