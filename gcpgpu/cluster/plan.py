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
from gcpgpu.resources import node_file, render
from gcpgpu.storage.spec import describe as describe_storage
from gcpgpu.times import format_duration

from . import autostop, hosttuning, slurm_state
from .cost import plan_price, plan_prices_source
from .names import LABEL_CLUSTER, LABEL_MANAGED, marker, network_tag, node_name
from .spec import ClusterSpec

GPU_NIC_CIDR = "10.{base}.{i}.0/24"  # one /24 per GPU NIC network (SkyPilot uses 10.129.i.0/24 likewise)
# The range IAP TCP forwarding connects from (Google's IAP guide "Using IAP for TCP forwarding",
# section "create a firewall rule"; read here through public Terraform that cites it).
IAP_RANGE = "35.235.240.0/20"


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
    routers: list[dict] = field(default_factory=list)  # a Cloud Router with the nodes' Cloud NAT (0 or 1)

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
        return plan_price(self)  # the region's price under its provisioning, flex-start too (gcpgpu/pricing)

    def bulk_insert_body(self, names: list[str]) -> dict:
        """instances.bulkInsert for `names` (all nodes, or the ones a re-run finds missing)."""
        return {
            "count": len(names),
            "minCount": len(names),  # all or nothing: a half-placed training cluster is useless
            "perInstanceProperties": {n: {} for n in names},
            "instanceProperties": self.instance_properties,
        }

    def max_run_duration(self) -> dict[str, Any] | None:
        """The server-side cap as the nodes carry it (scheduling.maxRunDuration, instanceTerminationAction)."""
        sched = self.instance_properties["scheduling"]
        if "maxRunDuration" not in sched:
            return None
        return {"seconds": int(sched["maxRunDuration"]["seconds"]),
                "instanceTerminationAction": sched["instanceTerminationAction"]}

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

    def bind_to_reservation(self) -> None:
        """Consume a DENSE or calendar-mode reservation: such VMs are RESERVATION_BOUND and end with it
        (cluster/reservation_use.py has the sources). The reservation's blocks and sub-blocks already
        place them close together, so no placement policy of gcpgpu's own is added."""
        sched = self.instance_properties["scheduling"]
        sched.update(provisioningModel="RESERVATION_BOUND", automaticRestart=False, onHostMaintenance="TERMINATE",
                     instanceTerminationAction=(self.spec.termination_action or "delete").upper())
        if self.policy and self.instance_properties.get("resourcePolicies") == [self.policy["name"]]:
            self.policy = None
            self.instance_properties.pop("resourcePolicies", None)
        self.notes.append(f"reservation {self.spec.reservation} is reservation-bound (DENSE or calendar mode): "
                          f"the nodes use provisioningModel RESERVATION_BOUND, "
                          f"{sched['instanceTerminationAction']} when it ends")

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
        rows.extend(self.node_rows())
        rows.extend(slurm_state.plan_rows(self.spec))
        nics = self.instance_properties["networkInterfaces"]
        mrdma = sum(1 for n in nics if n.get("nicType") == "MRDMA")
        gpu_nics = len(nics) - 1
        if mrdma:
            nic_text = f"{len(nics)} NICs ({len(nics) - mrdma} gVNIC + {mrdma} MRDMA)"
        else:
            nic_text = f"{len(nics)} NIC" + (f"s (1 host + {gpu_nics} GPU, gVNIC)" if gpu_nics else "")
        sched = self.instance_properties["scheduling"]
        queue = ""
        if self.flex_start:
            wait = self.spec.flex_wait or 0
            queue = f", instances.insert waiting up to {wait // 60}m for capacity" if wait \
                else ", only if capacity is there now"
        if "maxRunDuration" in sched:
            ended = {"DELETE": "deleted", "STOP": "stopped"}[sched["instanceTerminationAction"]]
            queue += f", {ended} by Compute Engine {format_duration(int(sched['maxRunDuration']['seconds']))} after it starts"
        for n in self.node_names:
            rows.append({"kind": "instance", "name": n, "where": " > ".join(self.zones),
                         "details": f"{self.machine.name}, {self.machine.gpu_count} x {self.machine.gpu.model}, "
                                    f"{sched['provisioningModel']}, {nic_text}{queue}"})
        return rows

    def node_rows(self) -> list[dict[str, Any]]:
        """What each node boots and installs, and what it needs to reach Google's APIs, with sources."""
        setup = catalog.node_setup(self.machine)
        disk = self.instance_properties["disks"][0]["initializeParams"]
        unverified = "" if setup.verified else " (unverified)"
        driver = {"dlvm-metadata": "NVIDIA driver by the Deep Learning VM (install-nvidia-driver=True)",
                  "baked": "NVIDIA driver in the image", "apt": "NVIDIA driver from NVIDIA's apt repository"}[setup.driver]
        installs = [driver, "docker + NVIDIA container toolkit", "docker credentials for "
                    f"{self.region}-docker.pkg.dev and us-docker.pkg.dev (gcloud auth configure-docker)"]
        host = catalog.gpudirect_host(self.machine.gpudirect) if self.machine.gpu_nics else None
        if host:
            installs.append(f"NCCL plugin ({host.installer_image.rsplit('/', 1)[-1]}); "
                            f"receive-datapath manager per job ({host.rxdm_image.rsplit('/', 1)[-1]}; source: {host.source})")
        elif self.machine.gpudirect == "rdma":
            installs.append("gIB NCCL plugin in the training image; RDMA NICs via /dev/infiniband")
        out = catalog.outbound()
        rows = [
            {"kind": "boot disk", "name": disk["diskType"], "where": "each node",
             "details": f"{disk['diskSizeGb']} GB from {disk['sourceImage'].rsplit('/', 1)[-1]} "
                        f"(source: {setup.source}){unverified}"},
            {"kind": "node setup", "name": "startup script", "where": "each node", "details": "; ".join(installs)},
            {"kind": "metrics agent", "name": "Ops Agent + dcgm receiver", "where": "each node",
             "details": "GPU metrics (NVML by default, DCGM when nvidia-dcgm runs) for `gcpgpu metrics` "
                        f"(source: {out.ops_agent_source})" + ("" if out.ops_agent_verified else " (unverified)")},
        ]
        external = any(n.get("accessConfigs") for n in self.instance_properties["networkInterfaces"])
        for router in self.routers:
            nat = router["nats"][0]
            rows.append({"kind": "cloud NAT", "name": f"{router['name']} / {nat['name']}", "where": self.region,
                         "details": f"outbound for nodes with no external IP on '{self.spec.network}' "
                                    f"({nat['sourceSubnetworkIpRangesToNat']}, {nat['natIpAllocateOption']}); "
                                    "skipped when the network already has a NAT in the region "
                                    f"(source: {out.cloud_nat_source})"})
        if not external:
            created = [s["name"] for s in self.subnets if s.get("privateIpGoogleAccess")]
            rows.append({"kind": "egress", "name": "Private Google Access", "where": self.spec.network,
                         "details": ("on for " + ", ".join(created) + "; " if created else "")
                         + f"the primary subnet of '{self.spec.network}' is left as it is"
                         + ("" if self.routers else ": with --no-nat it needs Private Google Access for Artifact "
                            "Registry, Cloud Storage and Monitoring, and the startup script's package installs fail")
                         + f" (source: {out.private_google_access_source})"})
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
            **plan_prices_source(self),
            "maxRunDuration": self.max_run_duration(),
            "placementPolicy": self.policy,
            "networks": self.networks,
            "subnetworks": self.subnets,
            "firewalls": self.firewalls,
            "routers": self.routers,
            "reservation": self.reservation,
            **({"disks": r} if (r := slurm_state.plan_rows(self.spec)) else {}),  # a Slurm cluster's state disk
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
                            "network": f"projects/{project}/global/networks/{net_name}", "privateIpGoogleAccess": True})
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
        if spec.network == "default":  # CT a3high/a3mega-slurm-blueprint.yaml: sysnet mtu 8244
            notes.append(f"{mt.name}: Cluster Toolkit runs the primary (system) network at MTU 8244 too; the "
                         "project's 'default' network keeps 1460 (pass --network with an MTU-8244 VPC).")
    elif mt.gpudirect == "rdma":
        _rdma_networks(spec, project, mt, networks, subnets, firewalls, nics, notes)

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

    # Field names and enum values below checked against the Compute v1 discovery document that
    # googleapiclient ships (Scheduling.provisioningModel FLEX_START|SPOT, instanceTerminationAction
    # DELETE|STOP, maxRunDuration a Duration with int64 `seconds`); tests/conformance/test_fabric_*.py.
    scheduling: dict[str, Any] = {"onHostMaintenance": "TERMINATE"}  # GPU VMs cannot live-migrate
    if spec.provisioning == "spot":
        # One field for both ends of a Spot VM: preemption and the end of maxRunDuration.
        scheduling.update(provisioningModel="SPOT", automaticRestart=False,
                          instanceTerminationAction=(spec.termination_action or "stop").upper())
    elif spec.provisioning == "flex-start":
        scheduling.update(provisioningModel="FLEX_START", automaticRestart=False,
                          instanceTerminationAction=(spec.termination_action or "delete").upper())
    else:
        # Cluster Toolkit turns automatic restart off with compact placement: a node restarted
        # elsewhere would leave the group.
        scheduling.update(provisioningModel="STANDARD", automaticRestart=policy is None)
    if spec.max_run_duration is not None:
        # Compute Engine ends the VM itself this long after it last entered RUNNING, whoever is
        # still watching: the cap holds with every agent and laptop gone.
        scheduling.update(maxRunDuration={"seconds": str(spec.max_run_duration)},
                          instanceTerminationAction=(spec.termination_action or "stop").upper())

    if spec.reservation:
        notes.append(f"--reservation {spec.reservation}: `up` reads it first; a DENSE or calendar-mode one makes "
                     "the nodes RESERVATION_BOUND instead of STANDARD")
    if reservation_name:
        affinity = {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
                    "values": [reservation_name]}
    elif spec.provisioning in ("spot", "flex-start"):
        affinity = {"consumeReservationType": "NO_RESERVATION"}
    else:
        affinity = {"consumeReservationType": "ANY_RESERVATION"}

    setup = catalog.node_setup(mt)
    host = catalog.gpudirect_host(mt.gpudirect) if mt.gpu_nics else None
    gpu_nics = sum(1 for n in nics[1:] if n.get("nicType") == "MRDMA") if mt.gpudirect == "rdma" else len(nics) - 1
    startup = render("startup.sh.j2", cluster=name, nodes=spec.nodes, machine_type=mt.name, gpus_per_node=mt.gpu_count,
                     gpu_nics=gpu_nics, project=project, region=region, driver=setup.driver, flavor=mt.gpudirect,
                     installer_image=host.installer_image if host else "", installer_args=host.installer_args if host else (),
                     ops_agent_repo_script=catalog.outbound().ops_agent_repo_script, local_ssds=mt.local_ssds,
                     prepull="" if spec.prepull in (None, "none") else spec.prepull,
                     storage=bool(spec.filestore or spec.lustre or spec.hyperdisk_ml or spec.mounts),
                     slurm=bool(spec.scheduler), slurm_device=slurm_state.DEVICE, host_sysctls=hosttuning.of(spec),
                     job_account=spec.job_service_account or "",
                     jobmeta_source=node_file("jobmeta.py") if spec.job_service_account else "")
    notes += hosttuning.notes(spec.host_tuning, mt)
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
            # What to take away is this run's instruction, not the cluster's shape: a recovery replaying it later
            # must not delete a file system a newer `up` made again.
            {"key": "gcpgpu-spec", "value": json.dumps({k: v for k, v in spec.to_dict().items()
                                                         if k not in ("remove", "unmount")}, sort_keys=True)},
            {"key": "enable-guest-attributes", "value": "TRUE"},  # node health for `cluster doctor`
            *autostop.metadata_items(spec.autostop, spec.autostop_down, region, project, spec.agent_image,
                                     spec.autostop_notify, spec.max_spend),  # and the spend cap (spend.py)
            # A Slurm cluster: the nodes run its daemons (gcpgpu/slurm/node.py) with the munge key that
            # `up` keeps in Secret Manager (named, never the key), node 0 with the queue on its state disk.
            *slurm_state.metadata_items(spec, project),
            # Jobs' own service account (--job-service-account): the nodes fence the metadata server off from them.
            *([{"key": "gcpgpu-job-service-account", "value": spec.job_service_account}] if spec.job_service_account else []),
            # The Deep Learning VM installs the NVIDIA driver on first boot when asked to.
            *([{"key": "install-nvidia-driver", "value": "True"}] if setup.driver == "dlvm-metadata" else []),
        ]},
        "serviceAccounts": [{"email": spec.service_account or "default", "scopes": list(spec.scopes)}],
        "tags": {"items": [tag]},
    }
    if policy:
        props["resourcePolicies"] = [policy["name"]]
    notes += describe_storage(spec)
    setup_needs = catalog.node_setup(mt).requires
    if setup_needs and spec.image == catalog.node_setup(mt).image:
        notes.append(f"{mt.name}: {setup_needs}.")
    return Plan(spec=spec, machine=mt, policy=policy, networks=networks, subnets=subnets, firewalls=firewalls,
                reservation=reservation, instance_properties=props,
                node_names=[node_name(name, r) for r in range(spec.nodes)], notes=notes,
                routers=_nat_routers(spec, project))


def nat_router_name(cluster: str) -> str:
    return f"{cluster}-nat"


def _nat_routers(spec: ClusterSpec, project: str) -> list[dict]:
    """A Cloud Router with one Cloud NAT on the primary network, for nodes with no external IP (Cluster
    Toolkit's vpc module makes one per region by default). `up` skips it when the network already
    has a NAT in the region: a NAT for all subnetworks must be the network's only one there."""
    if spec.external_ips or not spec.cloud_nat:
        return []
    name = nat_router_name(spec.name)
    return [{"name": name, "description": f"{marker(spec.name)} Cloud NAT for the nodes",
             "network": f"projects/{project}/global/networks/{spec.network}",
             # RouterNat enums per the Compute v1 discovery document; gcloud's --auto-allocate-nat-external-ips
             # --nat-all-subnet-ip-ranges send the same.
             "nats": [{"name": name, "natIpAllocateOption": "AUTO_ONLY",
                       "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES"}]}]


RDMA_CIDR = "10.131.{i}.0/24"  # one /24 per MRDMA subnet of the RoCE VPC (Cluster Toolkit splits one /18 likewise)


def _rdma_networks(spec: ClusterSpec, project: str, mt: catalog.MachineType, networks: list[dict], subnets: list[dict],
                   firewalls: list[dict], nics: list[dict], notes: list[str]) -> None:
    """A3 Ultra / A4: a second gVNIC VPC, and one VPC with the zone's RoCE network profile holding one subnet per
    MRDMA NIC. Source: Cluster Toolkit a4high-vm.yaml / a3ultra-vm.yaml (net-0 and net-1 at MTU 8896,
    modules/network/gpu-rdma-vpc with network_profile ZONE-vpc-roce, 8 subnets, nic2-9 MRDMA); gcp-facts section 10."""
    name, region, mark = spec.name, str(spec.region), marker(spec.name)
    mtu = mt.gvnic_mtu or 8896
    for i in range(1, mt.gvnic_networks):  # nic0 is the primary network: the family's first gVNIC
        net_name, sub_name, cidr = f"{name}-gvnic-{i}", f"{name}-gvnicsub-{i}", GPU_NIC_CIDR.format(base=130, i=i)
        link = f"projects/{project}/global/networks/{net_name}"
        networks.append({"name": net_name, "description": f"{mark} gVNIC {i}", "autoCreateSubnetworks": False,
                         "mtu": mtu, "routingConfig": {"routingMode": "REGIONAL"}})
        subnets.append({"name": sub_name, "description": f"{mark} gVNIC {i}", "ipCidrRange": cidr, "network": link,
                        "privateIpGoogleAccess": True})
        firewalls.append({"name": f"{name}-gvnicfw-{i}", "description": f"{mark} traffic on gVNIC {i}, from its own subnet only",
                          "network": link, "direction": "INGRESS", "priority": 1000, "sourceRanges": [cidr],
                          "allowed": [{"IPProtocol": "tcp"}, {"IPProtocol": "udp"}, {"IPProtocol": "icmp"}]})
        nics.append({"network": link, "subnetwork": f"projects/{project}/regions/{region}/subnetworks/{sub_name}",
                     "nicType": "GVNIC"})
    zone = spec.zones[0]
    rdma_net = f"{name}-rdma"
    link = f"projects/{project}/global/networks/{rdma_net}"
    networks.append({"name": rdma_net, "description": f"{mark} RDMA (RoCE) network", "autoCreateSubnetworks": False,
                     "mtu": mtu, "routingConfig": {"routingMode": "REGIONAL"},
                     "networkProfile": f"projects/{project}/global/networkProfiles/{zone}-vpc-roce"})
    for i in range(1, mt.gpu_nics + 1):
        sub_name = f"{name}-rdmasub-{i}"
        subnets.append({"name": sub_name, "description": f"{mark} MRDMA NIC {i}", "ipCidrRange": RDMA_CIDR.format(i=i),
                        "network": link})
        nics.append({"network": link, "subnetwork": f"projects/{project}/regions/{region}/subnetworks/{sub_name}",
                     "nicType": "MRDMA"})
    if len(spec.zones) > 1:
        notes.append(f"{mt.name}: the RDMA network's profile belongs to {zone}; the other zones "
                     f"({', '.join(spec.zones[1:])}) would need their own RoCE network: an attempt there is refused by the API.")
    if spec.network == "default":
        notes.append(f"{mt.name}: Cluster Toolkit runs the primary network at MTU {mtu}; the project's 'default' "
                     "network keeps 1460 (pass --network with an MTU-8896 VPC for full speed on nic0).")
