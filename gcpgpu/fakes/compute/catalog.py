"""The read-only catalog (project, zones, regions, machine and accelerator types, images) and quotas."""

from __future__ import annotations

import re

from ..core import ApiError, invalid, not_found, rfc3339, stable_number
from .state import BASE, Project, _quota_error, last


class CatalogMixin:
    def project_resource(self, project: str) -> dict:
        with self._lock:
            p = self.project(project)
            gpus = self._global_gpu_usage(p)
            return {
                "kind": "compute#project",
                "id": p.number,
                "name": project,
                "creationTimestamp": rfc3339(0),
                "selfLink": f"{BASE}/projects/{project}",
                "defaultServiceAccount": f"{p.number}-compute@developer.gserviceaccount.com",
                "commonInstanceMetadata": self.common_metadata(p),
                "quotas": [
                    {"metric": m, "limit": self._limit(None, m), "usage": gpus if m == "GPUS_ALL_REGIONS" else 0.0}
                    for m in self.world.global_quotas
                ],
                "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
                "defaultNetworkTier": "PREMIUM",
                "vmDnsSetting": "ZONAL_ONLY",
            }

    def zones(self, project: str) -> list[dict]:
        self.project(project)
        return [self.zone(project, z) for zones in self.world.regions.values() for z in zones]

    def zone(self, project: str, zone: str) -> dict:
        region = self.world.region_of(zone)
        if region is None:
            raise not_found(f"projects/{project}/zones/{zone}")
        return self._location(
            project, "zones", zone, 2000 + sorted(self.world.zone_machine_types).index(zone),
            region=self.link(project, f"regions/{region}"),
            availableCpuPlatforms=["Intel Sapphire Rapids", "Intel Cascade Lake", "AMD Genoa"],
        )

    def regions(self, project: str) -> list[dict]:
        return [self.region(project, r) for r in self.world.regions]

    def region(self, project: str, region: str) -> dict:
        if region not in self.world.regions:
            raise not_found(f"projects/{project}/regions/{region}")
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            usage = self._region_usage(p, region)
            return self._location(
                project, "regions", region, 1000 + list(self.world.regions).index(region),
                zones=[self.link(project, f"zones/{z}") for z in self.world.regions[region]],
                quotas=[
                    {"metric": m, "limit": self._limit(region, m), "usage": usage.get(m, 0.0)}
                    for m in sorted(set(self.world.region_quotas) | set(self.faults.quotas.get(region, {})))
                ],
            )

    def _location(self, project: str, collection: str, name: str, number: int, **fields: object) -> dict:
        """A zone or region as zones.get/regions.get show it: the fields both carry, then `fields`."""
        return {
            "kind": f"compute#{collection[:-1]}",
            "id": str(number),
            "name": name,
            "description": name,
            "status": "UP",
            **fields,
            "selfLink": self.link(project, f"{collection}/{name}"),
            "supportsPzs": False,
        }

    def machine_types(self, project: str, zone: str) -> list[dict]:
        self._check_zone(zone)
        return [self._machine_type(project, zone, m) for m in self.world.zone_machine_types[zone]]

    def machine_type(self, project: str, zone: str, name: str) -> dict:
        self._check_zone(zone)
        if name not in self.world.zone_machine_types[zone]:
            raise not_found(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        return self._machine_type(project, zone, name)

    def _machine_type(self, project: str, zone: str, name: str) -> dict:
        info = self.world.machine_types[name]
        out = {
            "kind": "compute#machineType",
            "id": str(stable_number(name, 10**12)),
            "name": name,
            "description": f"{info.vcpus} vCPUs, {info.memory_mb // 1024} GB RAM"
            + (f", {info.gpu_count} {info.gpu}" if info.gpu else ""),
            "guestCpus": info.vcpus,
            "memoryMb": info.memory_mb,
            "maximumPersistentDisks": 128,
            "maximumPersistentDisksSizeGb": "263168",
            "zone": zone,
            "isSharedCpu": False,
            "selfLink": self.link(project, f"zones/{zone}/machineTypes/{name}"),
        }
        if info.gpu:
            out["accelerators"] = [{"guestAcceleratorType": info.gpu, "guestAcceleratorCount": info.gpu_count}]
        return out

    def accelerator_types(self, project: str, zone: str) -> list[dict]:
        self._check_zone(zone)
        return [self._accelerator_type(project, zone, a) for a in self.world.accelerators_in_zone(zone)]

    def accelerator_type(self, project: str, zone: str, name: str) -> dict:
        self._check_zone(zone)
        if name not in self.world.accelerators_in_zone(zone):
            raise not_found(f"projects/{project}/zones/{zone}/acceleratorTypes/{name}")
        return self._accelerator_type(project, zone, name)

    def _accelerator_type(self, project: str, zone: str, name: str) -> dict:
        attachable = self.world.attachable.get(name)
        per_vm = max(attachable["limits"]) if attachable else max(
            (self.world.machine_types[m].gpu_count for m in self.world.zone_machine_types[zone]
             if self.world.machine_types[m].gpu == name),
            default=8,
        )
        return {
            "kind": "compute#acceleratorType",
            "id": str(stable_number(name, 10**9)),
            "name": name,
            "description": self.world.gpus[name]["model"],
            "zone": self.link(project, f"zones/{zone}"),
            "maximumCardsPerInstance": per_vm,
            "selfLink": self.link(project, f"zones/{zone}/acceleratorTypes/{name}"),
        }

    def image(self, image_project: str, name: str | None = None, family: str | None = None) -> dict:
        if family is not None:
            name = self.world.image_for_family(image_project, family)
            if name is None:
                raise not_found(f"projects/{image_project}/global/images/family/{family}")
        else:
            family = self.world.family_of_image(image_project, name or "")
            if family is None:
                raise not_found(f"projects/{image_project}/global/images/{name}")
        out = {
            "kind": "compute#image",
            "id": str(stable_number(name, 10**15)),
            "name": name,
            "status": "READY",
            "diskSizeGb": "10",
            "archiveSizeBytes": "1000000000",
            "architecture": "X86_64",
            "guestOsFeatures": [{"type": "GVNIC"}, {"type": "UEFI_COMPATIBLE"}, {"type": "VIRTIO_SCSI_MULTIQUEUE"}],
            "licenses": [],
            "selfLink": f"{BASE}/projects/{image_project}/global/images/{name}",
            "sourceType": "RAW",
            "creationTimestamp": rfc3339(0),
        }
        if family:  # an image published outside any family has none
            out["family"] = family
        return out

    def images(self, image_project: str) -> list[dict]:
        return [self.image(image_project, name=n) for n in self.world.images.get(image_project, {}).values()]

    def _resolve_image(self, project: str, source: str) -> dict:
        """sourceImage as users write it: full URL, projects/P/global/images[/family]/X, or global/images/X."""
        m = re.search(r"(?:projects/([^/]+)/)?(?:global/images/(family/)?|zones/[^/]+/(imageFamilyViews)/)([^/]+)$", source)
        if not m:
            raise invalid("resource.disks[0].initializeParams.sourceImage", source, "Must be an image path.")
        # gcloud names a family as projects/P/zones/-/imageFamilyViews/F.
        image_project, is_family, name = m.group(1) or project, m.group(2) or m.group(3), m.group(4)
        if is_family:
            return self.image(image_project, family=name)
        return self.image(image_project, name=name)

    # ------------------------------------------------------------------ quotas and capacity
    def _limit(self, region: str | None, metric: str) -> float:
        if region is None:
            return float(self.faults.quotas.get("global", {}).get(metric, self.world.global_quotas.get(metric, 0.0)))
        override = self.faults.quotas.get(region, {})
        if metric in override:
            return float(override[metric])
        return float(self.world.region_quotas.get(metric, 0.0))

    def _instance_usage(self, inst: dict) -> dict[str, float]:
        """Quota an instance holds while it exists and is not TERMINATED."""
        info = self.world.machine_types[inst["_machine_type"]]
        if self.instance_status(inst) == "TERMINATED":
            return {}
        usage = {"INSTANCES": 1.0}
        if inst.get("_reservation"):
            return usage  # the reservation already holds CPUs and GPUs
        usage["CPUS"] = float(info.vcpus)
        gpu = self._gpu_of(inst)
        if gpu:
            spot = inst.get("scheduling", {}).get("provisioningModel") == "SPOT"
            metric = self.world.gpus[gpu[0]]["spot_quota_metric" if spot else "quota_metric"]
            usage[metric] = usage.get(metric, 0.0) + gpu[1]
        return usage

    def _gpu_of(self, inst: dict) -> tuple[str, int] | None:
        accs = inst.get("guestAccelerators") or []
        if not accs:
            return None
        return last(accs[0]["acceleratorType"]), int(accs[0]["acceleratorCount"])

    def _region_usage(self, p: Project, region: str) -> dict[str, float]:
        usage: dict[str, float] = {}
        for path, inst in p.iter_kind("instances"):
            if self.world.region_of(path.split("/")[1]) == region:
                for k, v in self._instance_usage(inst).items():
                    usage[k] = usage.get(k, 0.0) + v
        for path, res in p.iter_kind("reservations"):
            if self.world.region_of(path.split("/")[1]) == region:
                for k, v in self._reservation_usage(res).items():
                    usage[k] = usage.get(k, 0.0) + v
        for kind, metric in (("resourcePolicies", "RESOURCE_POLICIES"), ("subnetworks", "SUBNETWORKS")):
            usage[metric] = float(len(p.coll(f"regions/{region}/{kind}")))
        return usage

    def _reservation_usage(self, res: dict) -> dict[str, float]:
        info = self.world.machine_types[res["_machine_type"]]
        count = float(res["specificReservation"]["count"])
        usage = {"CPUS": info.vcpus * count}
        if info.gpu:
            usage[self.world.gpus[info.gpu]["quota_metric"]] = info.gpu_count * count
        return usage

    def _global_gpu_usage(self, p: Project) -> float:
        total = 0.0
        for region in self.world.regions:
            usage = self._region_usage(p, region)
            total += sum(v for k, v in usage.items() if k.endswith("_GPUS"))
        return total

    def _check_quota(self, p: Project, region: str, extra: dict[str, float]) -> ApiError | None:
        usage = self._region_usage(p, region)
        for metric, amount in sorted(extra.items()):
            limit = self._limit(region, metric)
            if usage.get(metric, 0.0) + amount > limit:
                return _quota_error(metric, limit, usage.get(metric, 0.0), region)
        gpus = sum(v for k, v in extra.items() if k.endswith("_GPUS"))
        if gpus:
            limit = self._limit(None, "GPUS_ALL_REGIONS")
            used = self._global_gpu_usage(p)
            if used + gpus > limit:
                return _quota_error("GPUS_ALL_REGIONS", limit, used, None)
        return None
