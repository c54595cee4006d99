"""Bring a planned cluster up (reconciling with what exists) and tear clusters down.

up:   observe -> create what is missing (policy, networks, subnets, firewalls) -> per candidate zone:
      reservation (if asked) + ONE instances.bulkInsert -> on a stockout clean that zone and try the
      next -> rank labels -> wait until every node is RUNNING. A quota error or running out of zones
      removes what this run created, so a failed `up` leaves nothing behind.
down: observe -> instances -> reservation -> placement policy -> firewalls -> subnets -> networks,
      the order GCP requires, tolerating what is already gone; then observe again to prove it.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gcpgpu.errors import CloudError, is_google_error
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import Failure, classify, is_not_found
from gcpgpu.gcp.operations import retrying

from . import down as teardown_verbs
from . import holdings, munge, reservation_use, shared_fs, slurm_state
from .bootlabels import BootLabels
from .lease import Lease, LeaseLost
from .observe import ROW_FIELDS, Node, Observed, observe, observe_nodes, observe_nodes_by_name
from .plan import Plan
from .ranks import repair as repair_labels
from .session import Reporter, Session
from .teardown import delete_observed, one_line
from .topology import rank_by_topology

RUNNING_TIMEOUT = 1800.0
POLL_SECONDS = 1.0


class QuotaExceeded(CloudError):
    pass


class NoCapacity(CloudError):
    pass


class Cluster:
    """Operations on one project's clusters through the Compute API: each call is one attempt, with a
    Session (attempt id, lease) of its own."""

    def __init__(self, clients: Clients, project: str, reporter: Reporter | None = None) -> None:
        self.clients = clients
        self.project = project
        self.report = reporter or Reporter()
        self.last: Session | None = None  # the latest attempt (what it wrote and the lease it held)

    def session(self) -> Session:
        self.last = Session(self.clients, self.project, self.report)
        return self.last

    @property
    def attempt(self) -> str:
        return self.last.attempt if self.last else ""

    @property
    def lease(self) -> Lease | None:
        return self.last.lease if self.last else None

    def up(self, plan: Plan, wait_for_lease: bool = True) -> list[Node]:
        """Bring the cluster up under its lease; a failure removes exactly what this attempt created.

        The cloud is observed while the lease is taken: each read that finds the lease free starts an
        observation, and the one started by the read the winning write was based on is used."""
        s = self.session()
        seen: list[Future] = []
        pool = ThreadPoolExecutor(max_workers=2)
        try:
            with s.holding(plan.name, "up", wait_for_lease,
                           on_free=lambda: seen.append(pool.submit(observe, s.clients, s.project, plan.name))):
                return up(s, plan, seen[-1].result() if seen else None)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def down(self, name: str, keep_reservation: bool = False, wait_for_lease: bool = True) -> Observed:
        """Delete everything of cluster `name` under its lease; returns what was found.

        Keeps going past failures; raises (one line per resource) only if something is left.
        """
        s = self.session()
        with s.holding(name, "down", wait_for_lease):
            return teardown_verbs.down(s, name, keep_reservation)

    def shrink(self, name: str, nodes: int, wait_for_lease: bool = True) -> list[Node]:
        """Keep ranks 0..nodes-1 and delete the rest; the shared resources stay. Returns the nodes deleted.
        Under the cluster's lease, like `up` and `down`."""
        s = self.session()
        with s.holding(name, "down", wait_for_lease):
            return teardown_verbs.shrink(s, name, nodes)

    def status(self, name: str) -> Observed:
        return observe(self.clients, self.project, name)


# ---------------------------------------------------------------------- up
OWNER_KEY = "gcpgpu-owner"  # instance metadata: who made the cluster (gcp/identity.py); labels cannot hold an e-mail


def _stamp_owner(s: Session, plan: Plan, obs: Observed) -> None:
    """Its maker on every node `up` makes: the one who made its first nodes, else the caller."""
    from gcpgpu.gcp.identity import whoami

    owner = next((n.metadata[OWNER_KEY] for n in obs.nodes if n.metadata.get(OWNER_KEY)), None) or whoami(s.clients)
    items = plan.instance_properties["metadata"]["items"]
    items[:] = [i for i in items if i["key"] != OWNER_KEY] + [{"key": OWNER_KEY, "value": owner}]


def up(s: Session, plan: Plan, obs: Observed | None = None) -> list[Node]:
    """Create what the cluster lacks, as attempt `s`; on failure remove what `s` created. `obs`: the
    cluster as observed under this attempt's lease, if the caller already has it.

    Three rounds of operations, as the dependencies need: networks (and the placement policy and
    NAT beside them) -> subnetworks and firewalls -> one bulkInsert. The rank labels go out while
    the nodes boot (bootlabels), and a Cloud NAT that waits for its network finishes meanwhile."""
    name = plan.name
    s.report.step("observe", f"Looking for existing resources of cluster {name}")
    if obs is None:
        obs = observe(s.clients, s.project, name)
    obs.held = holdings.of_cluster(s.clients, s.project, name, obs.nodes)  # named too: up never drops one silently
    obs.scheduler = holdings.scheduler(obs.nodes, obs.held)
    if not obs.empty or obs.held:
        s.report.note(f"found {obs.summary()}: creating only what is missing")
    _check_compatible(s, plan, obs)
    _check_policy_room(plan, obs)
    _stamp_owner(s, plan, obs)
    shared_fs.check_attached(s, plan, sorted({n.zone for n in obs.nodes}) or plan.zones)
    if plan.spec.reservation:
        _adopt_reservation(s, plan, obs)
    try:
        nat = _ensure_shared(s, plan, obs)
        if plan.spec.scheduler and munge.ensure_key(s.clients, s.project, name, plan.spec.service_account):
            s.report.step("munge", f"Made the Slurm munge key of cluster {name} in Secret Manager "
                                   f"({munge.secret_name(s.project, name)})")
        _start_stopped(s, plan, obs)
        existing = {n.name for n in obs.nodes}
        missing = [n for n in plan.node_names if n not in existing]
        zones = sorted({n.zone for n in obs.nodes}) or slurm_state.pin_zones(s, plan.spec, shared_fs.pin_zones(
            s, plan, plan.zones))
        labels = BootLabels(s, plan, missing, fabric=not obs.nodes)
        if missing:
            zone = _place_nodes(s, plan, obs, missing, zones, labels)
            labels.settle()
        else:
            zone = zones[0]
            s.report.note(f"all {len(plan.node_names)} node(s) already exist")
        mounts = shared_fs.ensure(s, plan, zone)  # in the nodes' zone, while they boot
        # A new cluster's nodes are all this attempt's, labelled above: nothing to repair.
        repaired = repair_labels(s, plan) if obs.nodes else False
        nodes = labels.confirm(_wait_running(s, plan))
        slurm_state.ensure(s, plan.spec, zone)  # node 0 (new, or re-created under its name) gets Slurm's queue
        shared_fs.write_metadata(s, plan, mounts)
        for line in shared_fs.drop(s, plan):  # --no-filestore etc.: once no node names it
            s.report.note(f"could not delete: {line} (a re-run retries; 'gcpgpu cluster down {name}' also deletes it)")
        if nat:
            with s.report.waiting("waiting for the Cloud NAT"):
                s.finish(nat)
        # Fabric order only when the set of nodes or their ranks changed: never under a running job's feet.
        return rank_by_topology(s, plan, nodes) if missing or repaired else nodes
    except (KeyboardInterrupt, LeaseLost):
        # Everything is marked: a re-run resumes it, `down` removes it. After a lost lease nothing
        # may be rolled back either: a newer run may already have adopted what this one made.
        raise
    except Exception as e:
        left = rollback(s, plan.name)
        if left:  # the roll-back gave up too: say exactly what stays, and what removes it
            kind, text = (type(e), str(e)) if isinstance(e, CloudError) else (CloudError, one_line(e))
            text = text.replace(": nothing was left behind;", ";").replace(": nothing was left behind", "")
            raise kind(f"{text}; its roll-back left {len(left)} resource(s) behind: {', '.join(left)}; "
                       f"'gcpgpu cluster down {plan.name}' removes them") from e
        raise


def _start_stopped(s: Session, plan: Plan, obs: Observed) -> None:
    """Planned nodes that are TERMINATED (a Spot VM preempted with termination action STOP, a host
    error, a stop by hand) start again on their own disks, names and ranks: what `cluster status`
    says `up` will do. A start that finds no capacity fails like a stockout of the zone."""
    stopped = [n for n in obs.nodes if n.name in plan.node_names and n.status == "TERMINATED"]
    if not stopped:
        return
    s.report.step("start", f"Starting {len(stopped)} TERMINATED node(s) again: "
                           + ", ".join(n.name for n in stopped[:5]) + (" ..." if len(stopped) > 5 else ""))
    with s.report.waiting("waiting for the nodes to start"):
        s.batch(lambda n: s.call(s.client("InstancesClient").start,
                                 {"project": s.project, "zone": n.zone, "instance": n.name}), stopped)


def _check_compatible(s: Session, plan: Plan, obs: Observed) -> None:
    zones = sorted({n.zone for n in obs.nodes})
    if len(zones) > 1:
        raise CloudError(f"cluster {plan.name} has nodes in several zones ({', '.join(zones)}); "
                         f"run 'gcpgpu cluster down {plan.name}' and bring it up again")
    if zones and zones[0] not in plan.zones:
        raise CloudError(f"cluster {plan.name} already has nodes in {zones[0]}, outside the zones asked for "
                         f"({', '.join(plan.zones)}); pass --zone {zones[0]} or take it down first")
    wrong = sorted({n.machine_type for n in obs.nodes} - {plan.machine.name})
    if wrong:
        raise CloudError(f"cluster {plan.name} already has {wrong[0]} nodes, not {plan.machine.name}; "
                         f"take it down first ('gcpgpu cluster down {plan.name}')")
    extra = [n.name for n in obs.nodes if n.name not in plan.node_names]
    if extra:
        s.report.note(f"note: {len(extra)} node(s) beyond --nodes {plan.spec.nodes} exist and are left alone: "
                      f"{', '.join(extra[:5])}")


def _check_policy_room(plan: Plan, obs: Observed) -> None:
    """Policies are immutable: one made with a vmCount (older gcpgpu) cannot take more nodes."""
    for p in obs.policies:
        if p["vm_count"] and plan.policy and p["name"] == plan.policy["name"] and p["vm_count"] < plan.spec.nodes:
            raise CloudError(f"--nodes {plan.spec.nodes}: placement policy {p['name']} was made with vmCount "
                             f"{p['vm_count']} and policies cannot change; take cluster {plan.name} down and "
                             "bring it up again at the new size")


def _adopt_reservation(s: Session, plan: Plan, obs: Observed) -> None:
    """Find the reservation (zonal) in the candidate zones and keep only its zone; check it fits
    before anything is made; bind the nodes to a DENSE or calendar-mode one; and a reservation that
    carries a placement policy imposes it instead of ours."""
    target = reservation_use.parse_target(plan.spec.reservation)
    for zone in plan.zones:
        try:
            res = s.client("ReservationsClient").get(project=s.project, zone=zone, reservation=target.reservation)
        except Exception as e:
            if is_not_found(e):
                continue
            raise
        plan.spec.zones = [zone]
        have = {n.name for n in obs.nodes}
        reservation_use.check_fit(s, plan, res, zone, sum(1 for n in plan.node_names if n not in have))
        if reservation_use.binds(res):
            plan.bind_to_reservation()
            s.report.note(plan.notes[-1])
        links = list(dict(res.resource_policies).values())
        if links:
            plan.adopt_reservation_policies(links)
            s.report.note(f"reservation {res.name} ({zone}) carries placement policy "
                          f"{', '.join(x.rsplit('/', 1)[-1] for x in links)}: the nodes use it")
        return
    raise CloudError(f"--reservation {target.reservation}: no such reservation in "
                     f"{', '.join(plan.zones)} of project {s.project}")


def _ensure_shared(s: Session, plan: Plan, obs: Observed) -> list[Any]:
    """Placement policy, networks, subnets and firewalls: regional/global, shared by every zone attempt.
    Returns the operations still running that no node waits for (a Cloud NAT on a new network)."""
    region = plan.region
    ops = []
    if plan.policy and plan.policy["name"] not in {p["name"] for p in obs.policies}:
        s.report.step("policy", f"Creating compact placement policy {plan.policy['name']} in {region}")
        ops.append(s.call(s.client("ResourcePoliciesClient").insert, {
            "project": s.project, "region": region,
            "resource_policy_resource": s.owned("ResourcePolicy", plan.policy)}))
    new_nets = [n for n in plan.networks if n["name"] not in obs.networks]
    if new_nets:
        s.report.step("networks", f"Creating {len(new_nets)} GPU NIC network(s) (gVNIC, MTU {new_nets[0]['mtu']})")
    ops += s.start(lambda n: s.call(s.client("NetworksClient").insert, {
        "project": s.project, "network_resource": s.owned("Network", n)}), new_nets)
    # The NAT sits on the primary network, which exists already: it goes with the first batch.
    nat_later = any(r["network"].rsplit("/", 1)[-1] in {n["name"] for n in new_nets} for r in plan.routers)
    if not nat_later:
        ops += _ensure_nat(s, plan, obs)
    with s.report.waiting("waiting for the placement policy, networks and Cloud NAT"):
        s.finish(ops)

    have_subnets = {x["name"] for x in obs.subnets}
    new_subs = [x for x in plan.subnets if x["name"] not in have_subnets]
    new_fws = [f for f in plan.firewalls if f["name"] not in obs.firewalls]
    if new_subs or new_fws:
        s.report.step("subnets", f"Creating {len(new_subs)} subnetwork(s) and {len(new_fws)} internal-only "
                                 "firewall rule(s)")

    def insert(item: tuple[str, dict]) -> Any:
        kind, body = item
        if kind == "subnet":
            return s.call(s.client("SubnetworksClient").insert, {
                "project": s.project, "region": region, "subnetwork_resource": s.owned("Subnetwork", body)})
        return s.call(s.client("FirewallsClient").insert, {
            "project": s.project, "firewall_resource": s.owned("Firewall", body)})

    # A NAT on a network made above starts now and finishes while the nodes are created: bulkInsert
    # needs the subnetworks, not the NAT.
    nat = _ensure_nat(s, plan, obs) if nat_later else []
    with s.report.waiting("waiting for subnetworks and firewall rules"):
        s.batch(insert, [("subnet", x) for x in new_subs] + [("firewall", f) for f in new_fws])
    return nat


def _ensure_nat(s: Session, plan: Plan, obs: Observed) -> list[Any]:
    """Start the nodes' Cloud NAT, unless the cluster has it or the network already has a NAT in the
    region; the operations to wait for."""
    have = {r["name"] for r in obs.routers}
    todo = [r for r in plan.routers if r["name"] not in have]
    if not todo:
        return []
    network = todo[0]["network"].rsplit("/", 1)[-1]
    pager = retrying()(s.client("RoutersClient").list)(request={"project": s.project, "region": plan.region})
    serving = [f"{r.name}/{n.name}" for r in pager if r.network.rsplit("/", 1)[-1] == network for n in r.nats]
    if serving:
        s.report.note(f"network {network} already has Cloud NAT {serving[0]} in {plan.region}: using it")
        return []
    s.report.step("nat", f"Creating Cloud Router {todo[0]['name']} with a Cloud NAT on {network} in "
                         f"{plan.region} (nodes have no external IP)")
    return [s.call(s.client("RoutersClient").insert, {"project": s.project, "region": plan.region,
                                                    "router_resource": s.owned("Router", todo[0])})]


def _place_nodes(s: Session, plan: Plan, obs: Observed, missing: list[str], zones: list[str],
                 labels: BootLabels) -> str:
    """Try each candidate zone in turn; return the zone that took every missing node."""
    failures: list[tuple[str, Failure]] = []
    for zone in zones:
        failure = _try_zone(s, plan, obs, missing, zone, labels)
        if failure is None:
            return zone
        if failure.kind == "quota":
            raise QuotaExceeded(_quota_message(s, plan, failure, len(missing)))
        if failure.kind != "stockout":
            raise CloudError(f"creating {len(missing)} x {plan.machine.name} in {zone} failed: "
                             f"{failure.code or ''} {'/'.join(failure.reasons)}: {failure.message}".strip())
        failures.append((zone, failure))
        s.report.note(f"{zone}: no capacity ({failure.reasons[0] if failure.reasons else failure.code}); "
                      + ("trying the next zone" if zone != zones[-1] else "no zones left"))
    tried = ", ".join(z for z, _ in failures)
    raise NoCapacity(
        f"no capacity for {len(missing)} x {plan.machine.name} in {tried}: nothing was left behind; try "
        "--region with other zones, fewer --nodes, --spot, --flex-start DURATION, or a reservation")


def _try_zone(s: Session, plan: Plan, obs: Observed, missing: list[str], zone: str,
              labels: BootLabels) -> Failure | None:
    """One zone attempt: reservation (if asked) + one bulkInsert. None on success."""
    made_reservation = None
    if plan.reservation and not any(r["name"] == plan.reservation["name"] for r in obs.reservations):
        s.report.step("reservation", f"Creating reservation {plan.reservation['name']} "
                                     f"({plan.spec.nodes} x {plan.machine.name}) in {zone}")
        try:
            s.wait(s.call(s.client("ReservationsClient").insert, {
                "project": s.project, "zone": zone,
                "reservation_resource": s.owned("Reservation", plan.reservation)}))
            made_reservation = plan.reservation["name"]
        except Exception as e:
            if not is_google_error(e):
                raise
            return classify(e, from_operation=True)

    if plan.flex_start:
        from .flex import place_flex

        return place_flex(s, plan, missing, zone)
    s.report.step("instances", f"Creating {len(missing)} x {plan.machine.name} in {zone} (one instances.bulkInsert)")
    body = s.owned("BulkInsertInstanceResource", plan.bulk_insert_body(missing))
    try:
        op = s.call(s.client("InstancesClient").bulk_insert, {
            "project": s.project, "zone": zone, "bulk_insert_instance_resource_resource": body})
        labels.start()  # the VMs exist from the call on: label them while bulkInsert finishes
        with s.report.waiting(f"waiting for bulkInsert in {zone}"):
            s.wait(op)
    except BaseException as e:
        labels.abandon()  # also on Ctrl-C: no label may go out after this attempt let go of its lease
        if not isinstance(e, Exception) or not is_google_error(e):
            raise
        failure = classify(e, from_operation=True)
        if failure.kind == "transient":
            failure = Failure("stockout", failure.reasons, failure.message, failure.code)  # 503s that never end
        s.clean_zone(plan.name, zone, missing, made_reservation)
        return failure
    return None


def _wait_running(s: Session, plan: Plan) -> list[Node]:
    """Poll the cluster's nodes with one list call per round until all are RUNNING; the nodes as a row
    shows them (observe.ROW_FIELDS: no metadata)."""
    deadline = time.monotonic() + RUNNING_TIMEOUT
    want = set(plan.node_names)
    s.report.step("running", f"Waiting for {len(want)} node(s) to be RUNNING")
    with s.report.waiting("waiting for nodes") as update:
        while True:
            s.check_lease()
            nodes = [n for n in observe_nodes(s.clients, s.project, plan.name, ROW_FIELDS) if n.name in want]
            gone = sorted(want - {n.name for n in nodes})
            if gone:  # relabelled by hand is not gone: look once by name before failing
                nodes += [n for n in observe_nodes_by_name(s.clients, s.project, plan.name) if n.name in gone]
                gone = sorted(want - {n.name for n in nodes})
            if gone:
                raise CloudError(f"node {gone[0]} (of {len(gone)} missing) no longer exists: deleted while this "
                                 f"run waited for it; run 'gcpgpu cluster up {plan.name} ...' again to re-create it")
            running = sum(n.status == "RUNNING" for n in nodes)
            update(f"{running}/{len(want)} node(s) RUNNING")
            bad = [n for n in nodes if n.status in ("TERMINATED", "STOPPING", "SUSPENDED", "SUSPENDING")]
            if bad:
                raise CloudError(f"node {bad[0].name} is {bad[0].status} instead of starting; see "
                                 f"'gcpgpu cluster status {plan.name}'")
            if running == len(want):
                return nodes
            if time.monotonic() > deadline:
                raise CloudError(f"{running}/{len(want)} nodes RUNNING after {RUNNING_TIMEOUT:.0f} s")
            time.sleep(POLL_SECONDS)


def _quota_need(metric: str, plan: Plan, count: int) -> float | None:
    """What `count` more nodes take of quota `metric`, in its own unit (None where gcpgpu cannot tell)."""
    if "GPUS" in metric:  # NVIDIA_H100_GPUS, PREEMPTIBLE_..._GPUS, GPUS_ALL_REGIONS: GPUs
        return float(count * plan.machine.gpu_count)
    if "CPUS" in metric:  # CPUS, CPUS_ALL_REGIONS, A3_CPUS, PREEMPTIBLE_CPUS: vCPUs
        return float(count * plan.machine.vcpus)
    if metric in ("INSTANCES", "INSTANCES_ALL_REGIONS"):
        return float(count)
    return None


def _quota_message(s: Session, plan: Plan, failure: Failure, count: int) -> str:
    metric, limit = failure.quota_metric, failure.quota_limit
    # *_ALL_REGIONS quotas (and an error that names no region) are the project's, across regions.
    is_global = bool(metric and metric.endswith("_ALL_REGIONS")) or (metric is not None and not failure.quota_region)
    region = None if is_global else failure.quota_region or plan.region
    usage = None
    if metric:
        with contextlib.suppress(Exception):
            where = (s.client("ProjectsClient").get(project=s.project) if is_global
                     else s.client("RegionsClient").get(project=s.project, region=region))
            for q in where.quotas:
                if q.metric == metric:
                    usage, limit = q.usage, q.limit
    need = _quota_need(metric, plan, count) if metric else None
    head = f"quota {metric or 'exceeded'}" + (" (global: all regions together)" if is_global
                                               else f" in {region}" if region else "")
    numbers = []
    if limit is not None:
        numbers.append(f"limit {limit:g}")
    if usage is not None:
        numbers.append(f"in use {usage:g}")
    if need is not None:
        unit = "GPUs" if "GPUS" in str(metric) else "vCPUs" if "CPUS" in str(metric) else "VMs"
        numbers.append(f"this cluster needs {need:g} more {unit}")
    where = (f"https://console.cloud.google.com/iam-admin/quotas?project={s.project}"
             + (f"&metric={metric}" if metric else ""))
    return f"{head} is too low ({', '.join(numbers)}): nothing was left behind; ask for more at {where}"


def rollback(s: Session, cluster: str) -> list[str]:
    """Take back exactly what attempt `s` created, found by the attempt id it wrote on each resource;
    what it could not take back ("node c-1", ...), [] when nothing stays.

    That includes the members of a parallel batch whose calls succeeded while another failed, and
    never anything another run created. Best effort: one line per resource it could not delete.
    """
    try:
        mine = observe(s.clients, s.project, cluster).owned_by(s.attempt)
    except Exception as e:
        s.report.note(f"cleanup incomplete: could not list what this attempt created ({one_line(e)}); "
                      f"'gcpgpu cluster down {cluster}' finds it by name and label")
        return [f"whatever this attempt created (it could not be listed: {one_line(e)})"]
    if not mine.empty:
        s.report.step("rollback", f"Removing what this attempt created ({mine.summary()})")
        for line in delete_observed(s.clients, s.project, mine, fence=s.check_lease):
            s.report.note(f"cleanup incomplete: {line}")
    try:  # after the nodes that mounted them
        lines = shared_fs.delete(s, cluster, s.attempt) + slurm_state.delete(s, cluster, s.attempt)
    except Exception as e:
        lines = [f"shared file systems: {one_line(e)}"]
    for line in lines:
        s.report.note(f"cleanup incomplete: {line}")
    try:  # what is left, read again: a delete that gave up may still have gone through
        left = [f"{what} {name}" for what, name in observe(s.clients, s.project, cluster).owned_by(s.attempt).names()]
    except Exception as e:
        left = [f"what this attempt created (it could not be listed again: {one_line(e)})"] if not mine.empty else []
    return left + lines
