"""plan(spec) -> Plan: every resource a cluster needs, as the Compute API's own JSON, with no client.

A plan is a value: `cluster plan` prints it, `cluster up` applies it, tests inspect it. Resource
names are derived from the cluster's name so that any machine can rediscover a cluster: instances
carry labels; placement policies, reservations, networks and firewalls (which have no labels) carry
the cluster's name as a prefix and a marker in their description.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gcpgpu import catalog
from gcpgpu.resources import render

from .spec import ClusterSpec

LABEL_CLUSTER = "gcpgpu-cluster"
LABEL_RANK = "gcpgpu-rank"
LABEL_MANAGED = "gcpgpu-managed"
MARK = "gcpgpu:cluster="
GPU_NIC_CIDR = "10.{base}.{i}.0/24"  # one /24 per GPU NIC network (SkyPilot uses 10.129.i.0/24 likewise)
# The range IAP TCP forwarding connects from (Google's IAP guide "Using IAP for TCP forwarding",
# section "create a firewall rule"; read here through public Terraform that cites it).
IAP_RANGE = "35.235.240.0/20"


def marker(cluster: str) -> str:
    """The description marker that says a label-less resource belongs to `cluster`."""
    return f"{MARK}{cluster}"


def node_name(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}"


def rank_of(cluster: str, instance_name: str) -> int | None:
    suffix = instance_name[len(cluster) + 1:] if instance_name.startswith(cluster + "-") else ""
    return int(suffix) if suffix.isdigit() else None


def network_tag(cluster: str) -> str:
    return f"gcpgpu-{cluster}"


def iap_ssh_firewall(cluster: str, project: str, network: str) -> dict:
    """Opt-in (`up --iap-ssh`): IAP's range may reach port 22 of this cluster's nodes, nothing else."""
    return {
        "name": f"{cluster}-iap-ssh",
        "description": f"{marker(cluster)} ssh through IAP TCP forwarding (gcpgpu cluster ssh)",
        "network": f"projects/{project}/global/networks/{network}",
        "direction": "INGRESS", "priority": 1000,
        "sourceRanges": [IAP_RANGE],
        "targetTags": [network_tag(cluster)],
        "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
    }


def placement_details(gpp: dict, mt: catalog.MachineType) -> str:
    """The plan row for a compact policy: vmCount (or none: the cluster can grow) and the family's limit."""
    count = f"vmCount {gpp['vmCount']}" if gpp.get("vmCount") else "no vmCount (grow with 'up --nodes N')"
    limit = f"at most {mt.compact_max_vms} {mt.family} VMs per policy" + (
        "" if mt.compact_max_vms_verified else " (Cluster Toolkit's cap with maxDistance unset; Google's figure unverified)")
    return f"{gpp['collocation']}, {count}, {limit}"


@dataclass
class Plan:
    """What `up` creates, in the order GCP needs it."""

    spec: ClusterSpec
    machine: catalog.MachineType
    policy: dict | None
    networks: list[dict]
    subnets: list[dict]
    firewalls: list[dict]
    reservation: dict | None
    instance_properties: dict
    node_names: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def region(self) -> str:
        return str(self.spec.region)

    @property
    def zones(self) -> list[str]:
        return list(self.spec.zones)

    @property
    def gpus(self) -> int:
        return self.machine.gpu_count * self.spec.nodes

    @property
    def cost_per_hour(self) -> float | None:
        per_node = {"standard": self.machine.price_per_hour, "spot": self.machine.spot_price_per_hour}.get(
            self.spec.provisioning)
        return None if per_node is None else round(per_node * self.spec.nodes, 2)

    def bulk_insert_body(self, names: list[str]) -> dict:
        """instances.bulkInsert for `names` (all nodes, or the ones a re-run finds missing)."""
        return {
            "count": len(names),
            "minCount": len(names),  # all or nothing: a half-placed training cluster is useless
            "perInstanceProperties": {n: {} for n in names},
            "instanceProperties": self.instance_properties,
        }

    @property
    def flex_start(self) -> bool:
        return self.spec.provisioning == "flex-start"

    def flex_insert_body(self, name: str, zone: str) -> dict:
        """instances.insert for one flex-start node. The documented way to queue for flex-start capacity
        is per-instance insert with params.requestValidForDuration ("Relevant only for Instances.Insert
        API", Compute v1 InstanceParams); bulkInsert's InstanceProperties has no such field."""
        props = self.instance_properties
        disks = []
        for d in props["disks"]:
            init = dict(d.get("initializeParams") or {})
            if init.get("diskType") and "/" not in init["diskType"]:
                init["diskType"] = f"zones/{zone}/diskTypes/{init['diskType']}"  # insert takes a URL
            disks.append({**d, "initializeParams": init})
        body = {**props, "name": name, "disks": disks,
                "machineType": f"zones/{zone}/machineTypes/{props['machineType']}",
                "params": {"requestValidForDuration": {"seconds": str(self.spec.flex_wait or 0)}}}
        if props.get("resourcePolicies"):
            body["resourcePolicies"] = [f"regions/{self.region}/resourcePolicies/{x.rsplit('/', 1)[-1]}"
                                        for x in props["resourcePolicies"]]
        return body

    def adopt_reservation_policies(self, links: list[str]) -> None:
        """Consume a reservation that carries its own placement policy: the VMs take exactly the
        reservation's policies and no policy of our own is created (Cluster Toolkit
        `update_reservation_props`; dstack: no own placement policy inside a reservation)."""
        self.policy = None
        self.instance_properties["resourcePolicies"] = [link.rsplit("/", 1)[-1] for link in links]
        self.notes.append(f"reservation {self.spec.reservation} carries placement policy "
                          f"{', '.join(x.rsplit('/', 1)[-1] for x in links)}: the nodes use it, gcpgpu creates none")

    def reservation_body(self) -> dict | None:
        return self.reservation

    def resources(self) -> list[dict]:
        """One row per resource, for `cluster plan` and `up --dry-run`."""
        rows: list[dict[str, Any]] = []
        if self.policy:
            gpp = self.policy["groupPlacementPolicy"]
            rows.append({"kind": "placement policy", "name": self.policy["name"], "where": self.region,
                         "details": placement_details(gpp, self.machine)})
        for net in self.networks:
            rows.append({"kind": "network", "name": net["name"], "where": "global", "details": f"MTU {net['mtu']}"})
        for sub in self.subnets:
            rows.append({"kind": "subnetwork", "name": sub["name"], "where": self.region,
                         "details": f"{sub['ipCidrRange']} on {sub['network'].rsplit('/', 1)[-1]}"})
        for fw in self.firewalls:
            allowed = ",".join(a["IPProtocol"] + "".join(f":{p}" for p in a.get("ports", [])) for a in fw["allowed"])
            src = ", ".join(fw.get("sourceRanges") or [f"tag {t}" for t in fw.get("sourceTags", [])])
            scope = "IAP TCP forwarding only" if fw.get("sourceRanges") == [IAP_RANGE] else "internal only"
            rows.append({"kind": "firewall", "name": fw["name"], "where": fw["network"].rsplit("/", 1)[-1],
                         "details": f"allow {allowed} from {src} ({scope})"})
        if self.reservation:
            rows.append({"kind": "reservation", "name": self.reservation["name"], "where": "first zone that has capacity",
                         "details": f"{self.reservation['specificReservation']['count']} x {self.machine.name}"})
        elif self.spec.reservation:
            rows.append({"kind": "reservation (use)", "name": self.spec.reservation, "where": "existing",
                         "details": "SPECIFIC_RESERVATION; its own placement policy, if it has one, replaces ours"})
        nics = self.instance_properties["networkInterfaces"]
        gpu_nics = len(nics) - 1
        nic_text = f"{len(nics)} NIC" + (f"s (1 host + {gpu_nics} GPU, gVNIC)" if gpu_nics else "")
        sched = self.instance_properties["scheduling"]
        queue = ""
        if self.flex_start:
            wait = self.spec.flex_wait or 0
            queue = (f", instances.insert waiting up to {wait // 60}m for capacity, deleted after "
                     f"{int(sched['maxRunDuration']['seconds']) // 60}m") if wait else ", only if capacity is there now"
        for n in self.node_names:
            rows.append({"kind": "instance", "name": n, "where": " > ".join(self.zones),
                         "details": f"{self.machine.name}, {self.machine.gpu_count} x {self.machine.gpu.model}, "
                                    f"{sched['provisioningModel']}, {nic_text}{queue}"})
        return rows

    def to_dict(self) -> dict:
        return {
            "cluster": self.name,
            "machineType": self.machine.name,
            "nodes": self.spec.nodes,
            "gpus": self.gpus,
            "region": self.region,
            "zones": self.zones,
            "provisioning": self.spec.provisioning,
            "costPerHourUsd": self.cost_per_hour,
            "pricesAsOf": catalog.prices_as_of(),
            "placementPolicy": self.policy,
            "networks": self.networks,
            "subnetworks": self.subnets,
            "firewalls": self.firewalls,
            "reservation": self.reservation,
            **({"flexStartInserts": [self.flex_insert_body(n, self.zones[0]) for n in self.node_names]}
               if self.flex_start else {"bulkInsert": self.bulk_insert_body(self.node_names)}),
            "notes": self.notes,
        }


def plan(spec: ClusterSpec, project: str) -> Plan:
    """The resources for a validated spec. Pure: no API calls."""
    mt = catalog.get_machine_type(spec.machine_type)
    name, region = spec.name, str(spec.region)
    mark = marker(name)
    notes: list[str] = []

    policy = None
    if spec.placement == "compact":
        policy = {
            "name": f"{name}-placement",
            "description": f"{mark} compact placement for {spec.nodes} x {mt.name}",
            # No vmCount: the API field doc calls it "not recommended unless you want the policy to work
            # only with exactly this number of VMs", and a policy is immutable, so a vmCount would stop
            # the cluster from growing or replacing a node. Cluster Toolkit (Slurm resume.py
            # create_placement_request) and gcloud (`--vm-count` optional) leave it out too. maxDistance
            # stays unset: it is in the beta API only.
            "groupPlacementPolicy": {"collocation": "COLLOCATED"},
        }

    primary_net = spec.network
    primary = {"network": f"projects/{project}/global/networks/{primary_net}", "nicType": "GVNIC"}
    if spec.subnetwork:
        primary["subnetwork"] = f"projects/{project}/regions/{region}/subnetworks/{spec.subnetwork}"
    if spec.external_ips:
        primary["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    nics: list[dict] = [primary]

    networks: list[dict] = []
    subnets: list[dict] = []
    tag = network_tag(name)
    # Nodes talk to each other (rendezvous, NCCL bootstrap) on the primary network: allow exactly
    # the cluster's own nodes, by network tag, never a range the world can reach.
    firewalls: list[dict] = [{
        "name": f"{name}-internal",
        "description": f"{mark} node-to-node traffic within the cluster",
        "network": f"projects/{project}/global/networks/{primary_net}",
        "direction": "INGRESS",
        "priority": 1000,
        "sourceTags": [tag],
        "targetTags": [tag],
        "allowed": [{"IPProtocol": "tcp"}, {"IPProtocol": "udp"}, {"IPProtocol": "icmp"}],
    }]
    if spec.iap_ssh:
        firewalls.append(iap_ssh_firewall(name, project, primary_net))
    if mt.gpudirect in ("tcpx", "tcpxo") and mt.gpu_nics:
        # A3 High/Edge (4) and Mega (8): one VPC + subnet per GPU NIC, gVNIC, MTU 8244, internal only.
        for i in range(1, mt.gpu_nics + 1):
            net_name, sub_name = f"{name}-gpunet-{i}", f"{name}-gpusub-{i}"
            cidr = GPU_NIC_CIDR.format(base=129, i=i)
            networks.append({"name": net_name, "description": f"{mark} GPU NIC {i}", "autoCreateSubnetworks": False,
                             "mtu": mt.gpu_nic_mtu or 8244, "routingConfig": {"routingMode": "REGIONAL"}})
            subnets.append({"name": sub_name, "description": f"{mark} GPU NIC {i}", "ipCidrRange": cidr,
                            "network": f"projects/{project}/global/networks/{net_name}"})
            firewalls.append({
                "name": f"{name}-gpufw-{i}",
                "description": f"{mark} NCCL traffic on GPU NIC {i}, from the cluster's own subnet only",
                "network": f"projects/{project}/global/networks/{net_name}",
                "direction": "INGRESS", "priority": 1000, "sourceRanges": [cidr],
                "allowed": [{"IPProtocol": "tcp"}, {"IPProtocol": "udp"}, {"IPProtocol": "icmp"}],
            })
            nics.append({"network": f"projects/{project}/global/networks/{net_name}",
                         "subnetwork": f"projects/{project}/regions/{region}/subnetworks/{sub_name}",
                         "nicType": "GVNIC"})
    elif mt.gpudirect == "rdma":
        notes.append(f"{mt.name}: the RDMA network (network profile <zone>-vpc-roce, MRDMA NICs) and its 2 gVNIC VPCs "
                     "are not wired by gcpgpu yet; nodes get the primary NIC only, so NCCL runs over TCP.")

    reservation = None
    reservation_name = spec.reservation
    if spec.create_reservation:
        reservation_name = f"{name}-res"
        reservation = {
            "name": reservation_name,
            "description": f"{mark} capacity for {spec.nodes} x {mt.name}",
            "specificReservationRequired": True,
            "specificReservation": {"count": str(spec.nodes), "instanceProperties": {"machineType": mt.name}},
        }
        if policy:
            reservation["resourcePolicies"] = {"policy": f"projects/{project}/regions/{region}/resourcePolicies/{policy['name']}"}

    scheduling: dict[str, Any] = {"onHostMaintenance": "TERMINATE"}  # GPU VMs cannot live-migrate
    if spec.provisioning == "spot":
        scheduling.update(provisioningModel="SPOT", automaticRestart=False, instanceTerminationAction="STOP")
    elif spec.provisioning == "flex-start":
        scheduling.update(provisioningModel="FLEX_START", automaticRestart=False, instanceTerminationAction="DELETE",
                          maxRunDuration={"seconds": str(spec.max_run_duration)})
    else:
        # Cluster Toolkit turns automatic restart off with compact placement: a node restarted
        # elsewhere would leave the group.
        scheduling.update(provisioningModel="STANDARD", automaticRestart=policy is None)

    if reservation_name:
        affinity = {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
                    "values": [reservation_name]}
    elif spec.provisioning in ("spot", "flex-start"):
        affinity = {"consumeReservationType": "NO_RESERVATION"}
    else:
        affinity = {"consumeReservationType": "ANY_RESERVATION"}

    startup = render("startup.sh.j2", cluster=name, nodes=spec.nodes, machine_type=mt.name, gpus_per_node=mt.gpu_count,
                     gpu_nics=len(nics) - 1, project=project)
    props: dict[str, Any] = {
        "machineType": mt.name,
        "description": f"gcpgpu cluster {name}",
        "disks": [{
            "boot": True, "autoDelete": True, "type": "PERSISTENT",
            "initializeParams": {"sourceImage": spec.image, "diskSizeGb": str(spec.boot_disk_gb),
                                 "diskType": spec.boot_disk_type},
        }],
        "networkInterfaces": nics,
        "scheduling": scheduling,
        "reservationAffinity": affinity,
        "labels": {**spec.labels, LABEL_CLUSTER: name, LABEL_MANAGED: "true"},
        "metadata": {"items": [
            {"key": "startup-script", "value": startup},
            {"key": "gcpgpu-cluster", "value": name},
            {"key": "gcpgpu-nodes", "value": str(spec.nodes)},
            # The spec itself, so a job's recovery can bring the cluster back to it from the nodes alone.
            {"key": "gcpgpu-spec", "value": json.dumps(spec.to_dict(), sort_keys=True)},
        ]},
        "serviceAccounts": [{"email": spec.service_account or "default", "scopes": list(spec.scopes)}],
        "tags": {"items": [tag]},
    }
    if policy:
        props["resourcePolicies"] = [policy["name"]]
    return Plan(spec=spec, machine=mt, policy=policy, networks=networks, subnets=subnets, firewalls=firewalls,
                reservation=reservation, instance_properties=props,
                node_names=[node_name(name, r) for r in range(spec.nodes)], notes=notes)
