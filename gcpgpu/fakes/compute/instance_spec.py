"""An instance body checked the way the real API checks it, and turned into the stored resource."""

from __future__ import annotations

import ipaddress

from ..core import ApiError, check_name, invalid, required
from .gpus import attached_gpus
from .links import fingerprint, global_name, network
from .netops import check_tags
from .state import FLEX_START_RANGE, GPU_FREE_MIGRATION_ERROR, Project, _check_labels, last


class InstanceSpecMixin:
    def _prepare_instance(self, p: Project, project: str, zone: str, region: str, body: dict, field: str) -> dict:
        """Validate an instance body the way the real API does and return the stored resource."""
        check_name(f"{field}.name", body.get("name"))
        mt = last(body.get("machineType"))
        if not mt:
            raise required(f"{field}.machineType")
        if mt not in self.world.zone_machine_types[zone]:
            raise invalid(f"{field}.machineType", body["machineType"],
                          f"Machine type with name '{mt}' does not exist in zone '{zone}'.")
        _check_labels(body.get("labels") or {}, f"{field}.labels")

        accs = attached_gpus(self.world, project, zone, mt, body.get("guestAccelerators") or [], field, self.link)

        given = body.get("scheduling") or {}
        # The API's own words: "For standard instances, the default behavior is MIGRATE. For
        # preemptible instances, the default and only possible behavior is TERMINATE." Spot (and
        # flex-start) VMs are preemptible in that sense, so gcloud's --provisioning-model=SPOT
        # without --maintenance-policy works on a GPU VM.
        preemptible = bool(given.get("preemptible")) or given.get("provisioningModel") in ("SPOT", "FLEX_START")
        sched = {"onHostMaintenance": "TERMINATE" if preemptible else "MIGRATE", "automaticRestart": not preemptible,
                 "preemptible": False, "provisioningModel": "STANDARD", **given}
        model = sched["provisioningModel"]
        if model not in ("STANDARD", "SPOT", "FLEX_START", "RESERVATION_BOUND"):
            raise invalid(f"{field}.scheduling.provisioningModel", model, "Must be STANDARD, SPOT, FLEX_START or RESERVATION_BOUND.")
        if preemptible and sched["onHostMaintenance"] != "TERMINATE":
            raise invalid(f"{field}.scheduling.onHostMaintenance", sched["onHostMaintenance"],
                          "Preemptible and Spot instances can only use TERMINATE.")
        if accs and sched["onHostMaintenance"] != "TERMINATE":
            raise ApiError(400, "invalid", GPU_FREE_MIGRATION_ERROR)
        if model in ("SPOT", "FLEX_START") and sched.get("automaticRestart"):
            sched["automaticRestart"] = False
        self._check_run_limit(sched, field)
        if model == "FLEX_START":
            secs = int((sched.get("maxRunDuration") or {}).get("seconds", 0))
            if not FLEX_START_RANGE[0] <= secs <= FLEX_START_RANGE[1]:
                raise invalid(f"{field}.scheduling.maxRunDuration.seconds", secs,
                              f"Must be between {FLEX_START_RANGE[0]} and {FLEX_START_RANGE[1]} for FLEX_START.")
            # Flex-start (Instance schema / Google's flex-start guide): STOP or DELETE at the end of the
            # run duration, and never from a reservation.
            if sched.get("instanceTerminationAction") not in ("STOP", "DELETE"):
                raise invalid(f"{field}.scheduling.instanceTerminationAction", sched.get("instanceTerminationAction"),
                              "FLEX_START VMs must set STOP or DELETE.")
            kind = (body.get("reservationAffinity") or {}).get("consumeReservationType")
            if kind != "NO_RESERVATION":
                raise invalid(f"{field}.reservationAffinity.consumeReservationType", kind,
                              "FLEX_START VMs must use NO_RESERVATION.")

        disks = body.get("disks") or []
        if not disks:
            raise required(f"{field}.disks")
        stored_disks = []
        for i, d in enumerate(disks):
            if d.get("source"):  # an existing disk (disks.py checks who else has it)
                link = self.link(project, f"zones/{zone}/instances/{body['name']}")
                stored_disks.append(self.attached_disk(p, zone, link, {**d, "boot": d.get("boot", i == 0)}, i,
                                                       f"{field}.disks[{i}]"))
                continue
            init = d.get("initializeParams") or {}
            if d.get("boot", i == 0) and not d.get("source"):
                if not init.get("sourceImage"):
                    raise required(f"{field}.disks[{i}].initializeParams.sourceImage")
                img = self._resolve_image(project, init["sourceImage"])
                init = {**init, "sourceImage": img["selfLink"]}
            self._check_disk_type(mt, init.get("diskType"), f"{field}.disks[{i}].initializeParams.diskType")
            disk_name = init.get("diskName") or (body["name"] if i == 0 else f"{body['name']}-{i}")
            stored_disks.append({
                "kind": "compute#attachedDisk", "type": d.get("type", "PERSISTENT"), "mode": d.get("mode", "READ_WRITE"),
                "boot": bool(d.get("boot", i == 0)), "autoDelete": bool(d.get("autoDelete", True)), "index": i,
                "deviceName": d.get("deviceName") or (f"persistent-disk-{i}"),
                "diskSizeGb": str(init.get("diskSizeGb", 10)), "interface": d.get("interface", "SCSI"),
                "source": self.link(project, f"zones/{zone}/disks/{disk_name}"),
            })

        nics = body.get("networkInterfaces") or []
        if not nics:
            raise required(f"{field}.networkInterfaces")
        stored_nics = []
        for i, nic in enumerate(nics):
            stored_nics.append(self._prepare_nic(p, project, region, nic, i, f"{field}.networkInterfaces[{i}]"))

        self._check_nic_kinds(p, mt, zone, stored_nics, f"{field}.networkInterfaces")

        policies = []
        for link in body.get("resourcePolicies") or []:
            policies.append(self._policy_for(p, region, link, f"{field}.resourcePolicies")["selfLink"])
        # Compact placement is allowed with flex-start VMs (AI Hypercomputer guide "create VMs",
        # gcp-facts section 10), unlike flex-start through MIG resize requests.

        affinity = body.get("reservationAffinity") or {"consumeReservationType": "ANY_RESERVATION"}
        meta_items = (body.get("metadata") or {}).get("items") or []
        labels = body.get("labels") or {}
        tags = check_tags((body.get("tags") or {}).get("items") or [], f"{field}.tags.items")
        return {
            "kind": "compute#instance",
            "name": body["name"],
            "description": body.get("description", ""),
            "machineType": self.link(project, f"zones/{zone}/machineTypes/{mt}"),
            "zone": self.link(project, f"zones/{zone}"),
            "canIpForward": bool(body.get("canIpForward", False)),
            "networkInterfaces": stored_nics,
            "disks": stored_disks,
            "metadata": {"kind": "compute#metadata", "fingerprint": fingerprint(meta_items), "items": meta_items},
            "serviceAccounts": body.get("serviceAccounts") or [],
            "scheduling": sched,
            "guestAccelerators": accs,
            "labels": labels,
            "labelFingerprint": fingerprint(labels),
            "tags": {**({"items": tags} if tags else {}), "fingerprint": fingerprint(tags)},
            "resourcePolicies": policies,
            "reservationAffinity": affinity,
            "cpuPlatform": "Intel Sapphire Rapids" if mt.startswith("a3") else "Intel Cascade Lake",
            "deletionProtection": bool(body.get("deletionProtection", False)),
            "startRestricted": False,
            "shieldedInstanceConfig": body.get("shieldedInstanceConfig")
            or {"enableSecureBoot": False, "enableVtpm": True, "enableIntegrityMonitoring": True},
            "fingerprint": fingerprint(body["name"]),
            "_machine_type": mt,
        }

    def _check_disk_type(self, mt: str, disk_type: str | None, field: str) -> None:
        """A3 Ultra and A4 boot from Hyperdisk only; each family has its list (catalog `nodes`).

        The message is Compute's own for a disk type a machine series cannot use ("[pd-standard,
        n4-standard-2] features are not compatible for creating instance.", quoted in public reports:
        astronomer/astronomer#2463, DataBiosphere/dsub#301); its HTTP code/reason here (400
        UNSUPPORTED_OPERATION, at insert rather than in the operation) is unverified."""
        allowed = self.world.machine_rules.get(mt, {}).get("boot_disk_types")
        if disk_type and allowed and last(disk_type) not in allowed:
            raise ApiError(400, "UNSUPPORTED_OPERATION",
                           f"[{last(disk_type)}, {mt}] features are not compatible for creating instance.")

    def _check_nic_kinds(self, p: Project, mt: str, zone: str, nics: list[dict], field: str) -> None:
        """MRDMA NICs: only on RDMA machine types, only on a VPC with this zone's RoCE profile, and
        exactly as many as the machine has RDMA NICs, beside at most its gVNIC count."""
        rules = self.world.machine_rules.get(mt, {})
        want, gvnics = rules.get("rdma_nics", 0), rules.get("gvnics")
        mrdma = 0
        for i, nic in enumerate(nics):
            net = p.coll("global/networks").get(last(nic["network"])) or {}
            profile = last(net.get("networkProfile") or "")
            if nic.get("nicType") == "MRDMA":
                mrdma += 1
                if not want:
                    raise invalid(f"{field}[{i}].nicType", "MRDMA", f"Machine type '{mt}' does not support MRDMA NICs.")
                if profile != f"{zone}-vpc-roce":
                    raise invalid(f"{field}[{i}].network", nic["network"],
                                  f"An MRDMA NIC needs a network with network profile '{zone}-vpc-roce'.")
            elif profile.endswith("-vpc-roce"):
                raise invalid(f"{field}[{i}].nicType", nic.get("nicType", "GVNIC"),
                              "A network with an RDMA network profile takes MRDMA NICs only.")
        if want and mrdma and mrdma != want:
            raise invalid(f"{field}", f"{mrdma} MRDMA NICs", f"Machine type '{mt}' takes {want} MRDMA NICs.")
        if gvnics is not None and len(nics) - mrdma > gvnics:
            raise invalid(f"{field}", f"{len(nics) - mrdma} non-RDMA NICs",
                          f"Machine type '{mt}' takes at most {gvnics} gVNIC NICs.")

    def _prepare_nic(self, p: Project, project: str, region: str, nic: dict, i: int, field: str) -> dict:
        net_link, sub_link = nic.get("network"), nic.get("subnetwork")
        sub = None
        if sub_link:
            sub = self._in_region(p, region, "subnetworks", sub_link, f"{field}.subnetwork",
                                  f"Subnetwork must be in region '{region}'.")
            net = p.coll("global/networks").get(last(sub["network"]))
            if net_link and global_name(net_link, "networks", f"{field}.network") != net["name"]:
                raise invalid(f"{field}.network", net_link, "Subnetwork does not belong to this network.")
        else:
            net = network(p, net_link or "global/networks/default", f"{field}.network")
            net_name = net["name"]
            sub = next((s for s in p.coll(f"regions/{region}/subnetworks").values() if s["network"] == net["selfLink"]), None)
            if sub is None:
                raise ApiError(400, "SUBNET_NOT_FOUND_FOR_VPC",
                               f"Network '{net_name}' has no subnetwork in region '{region}'; specify a subnetwork.")
        nic_type = nic.get("nicType")
        if nic_type and nic_type not in ("GVNIC", "VIRTIO_NET", "MRDMA", "IRDMA", "UNSPECIFIED_NIC_TYPE"):
            raise invalid(f"{field}.nicType", nic_type, "Must be GVNIC, VIRTIO_NET or MRDMA.")
        cidr = ipaddress.ip_network(sub["ipCidrRange"])
        offset = p.next_ip.get(sub["selfLink"], 2)
        p.next_ip[sub["selfLink"]] = offset + 1
        out = {
            "kind": "compute#networkInterface",
            "name": f"nic{i}",
            "network": net["selfLink"],
            "subnetwork": sub["selfLink"],
            "networkIP": str(cidr.network_address + offset),
            "stackType": nic.get("stackType", "IPV4_ONLY"),
            "fingerprint": fingerprint([sub["selfLink"], offset]),
        }
        if nic_type:
            out["nicType"] = nic_type
        if nic.get("accessConfigs"):
            # External addresses come from TEST-NET-2: the emulator owns no real public IPs.
            out["accessConfigs"] = [
                {"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT", "name": ac.get("name", "External NAT"),
                 "natIP": f"198.51.100.{(offset % 250) + 1}", "networkTier": ac.get("networkTier", "PREMIUM")}
                for ac in nic["accessConfigs"]
            ]
        return out
