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
import copy
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import Failure, classify, is_not_found
from gcpgpu.gcp.operations import call, parallel, retrying, wait, wait_all

from .lease import Lease, describe
from .nat import settle as settle_nats
from .observe import LABEL_ATTEMPT, Node, Observed, list_nodes, observe, observe_nodes, observe_nodes_by_name
from .plan import LABEL_CLUSTER, Plan, marker
from .ranks import label_new
from .ranks import repair as repair_labels
from .teardown import ORDER, delete_batch, delete_observed, items_of, one_line
from .topology import rank_by_topology

RUNNING_TIMEOUT = 1800.0
POLL_SECONDS = 1.0


class Reporter:
    """Progress of a long command. `step` marks each phase (tests interrupt there)."""

    def step(self, key: str, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[Any]:
        yield lambda _t: None


class ConsoleReporter(Reporter):
    """Phases as lines on stderr, waits as a live spinner (rich)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)

    def step(self, key: str, text: str) -> None:
        self.console.print(f"[bold cyan]>[/] {text}")

    def note(self, text: str) -> None:
        self.console.print(f"  {text}")

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[Any]:
        with self.console.status(text) as status:
            yield lambda t: status.update(t)


class QuotaExceeded(CloudError):
    pass


class NoCapacity(CloudError):
    pass


@dataclass
class Created:
    """What this run created, so a failure can take exactly that back."""

    policy: tuple[str, str] | None = None  # (region, name)
    networks: list[str] = field(default_factory=list)
    subnets: list[tuple[str, str]] = field(default_factory=list)
    firewalls: list[str] = field(default_factory=list)
    reservations: list[tuple[str, str]] = field(default_factory=list)  # (zone, name)
    instances: list[tuple[str, str]] = field(default_factory=list)  # (zone, name)
    routers: list[tuple[str, str]] = field(default_factory=list)  # (region, name)


def _msg(cls: Any, body: dict) -> Any:
    return cls.from_json(json.dumps(body))


def new_attempt_id() -> str:
    """One `up` (or `down`) attempt: recorded on what it creates and as the lease's holder."""
    return uuid.uuid4().hex[:12]


class Cluster:
    """Operations on one project's clusters through the Compute API."""

    def __init__(self, clients: Clients, project: str, reporter: Reporter | None = None) -> None:
        self.clients = clients
        self.project = project
        self.report = reporter or Reporter()
        self.attempt = ""
        self.lease: Lease | None = None

    def _own(self, body: dict | None) -> Any:
        """A copy of a plan's resource that says which attempt creates it (label on VMs, description elsewhere)."""
        if body is None:
            return None
        out = copy.deepcopy(body)
        # A bulkInsert (the VMs it makes) or one instance (a flex-start insert).
        props = out["instanceProperties"] if "instanceProperties" in out else out if "machineType" in out else None
        if props is not None:
            props["labels"] = {**props.get("labels", {}), LABEL_ATTEMPT: self.attempt}
            props["description"] = f"{marker(str(props['labels'].get(LABEL_CLUSTER)))} node attempt={self.attempt}"
        else:
            out["description"] = f"{out.get('description', '')} attempt={self.attempt}".strip()
        return out

    @contextlib.contextmanager
    def _holding(self, cluster: str, op: str, wait_for_lease: bool) -> Iterator[Lease]:
        lease = Lease(self.clients, self.project, cluster, self.attempt, op)
        self.lease = lease
        with self.report.waiting(f"taking cluster {cluster}'s lease") as update:
            lease.acquire(wait_for_lease, lambda h: update(f"cluster {cluster} is busy: {describe(h)}"))
        try:
            yield lease
        finally:
            with contextlib.suppress(Exception):  # an unreleased lease expires; never hide the real error
                lease.release()

    def c(self, name: str) -> Any:
        return self.clients.compute(name)

    def _wait(self, op: Any) -> None:
        wait(self.clients, self.project, op)

    def _wait_all_or_raise(self, ops: list[Any]) -> None:
        errors = [e for e in wait_all(self.clients, self.project, ops) if e is not None]
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ up
    def up(self, plan: Plan, wait_for_lease: bool = True) -> list[Node]:
        """Bring the cluster up under its lease; a failure removes exactly what this attempt created."""
        self.attempt = new_attempt_id()
        with self._holding(plan.name, "up", wait_for_lease):
            return self._up(plan)

    def _up(self, plan: Plan) -> list[Node]:
        from google.cloud import compute_v1

        name = plan.name
        self.report.step("observe", f"Looking for existing resources of cluster {name}")
        obs = observe(self.clients, self.project, name)
        if not obs.empty:
            self.report.note(f"found {obs.summary()}: creating only what is missing")
        self._check_compatible(plan, obs)
        self._check_policy_room(plan, obs)
        if plan.spec.reservation:
            self._adopt_reservation(plan)
        created = Created()
        try:
            self._ensure_shared(plan, obs, created, compute_v1)
            existing = {n.name: n for n in obs.nodes}
            missing = [n for n in plan.node_names if n not in existing]
            zones = sorted({n.zone for n in obs.nodes}) or plan.zones
            if missing:
                zone = self._place_nodes(plan, obs, missing, zones, created, compute_v1)
                label_new(self, plan, zone, missing)
            else:
                self.report.note(f"all {len(plan.node_names)} node(s) already exist")
            repaired = repair_labels(self, plan)
            nodes = self._wait_running(plan)
            # Fabric order only when the set of nodes or their ranks changed: never under a running job's feet.
            return rank_by_topology(self, plan, nodes) if missing or repaired else nodes
        except KeyboardInterrupt:
            raise  # everything is marked: a re-run resumes it, `down` removes it
        except Exception:
            self._rollback(plan.name)
            raise

    def _check_compatible(self, plan: Plan, obs: Observed) -> None:
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
            self.report.note(f"note: {len(extra)} node(s) beyond --nodes {plan.spec.nodes} exist and are left alone: "
                             f"{', '.join(extra[:5])}")

    def _check_policy_room(self, plan: Plan, obs: Observed) -> None:
        """Policies are immutable: one made with a vmCount (older gcpgpu) cannot take more nodes."""
        for p in obs.policies:
            if p["vm_count"] and plan.policy and p["name"] == plan.policy["name"] and p["vm_count"] < plan.spec.nodes:
                raise CloudError(f"--nodes {plan.spec.nodes}: placement policy {p['name']} was made with vmCount "
                                 f"{p['vm_count']} and policies cannot change; take cluster {plan.name} down and "
                                 "bring it up again at the new size")

    def _adopt_reservation(self, plan: Plan) -> None:
        """A reservation that carries a placement policy imposes it: find the reservation (zonal) in the
        candidate zones, keep only its zone, and let the nodes take its policies instead of ours."""
        for zone in plan.zones:
            try:
                res = self.c("ReservationsClient").get(project=self.project, zone=zone,
                                                       reservation=str(plan.spec.reservation).rsplit("/", 1)[-1])
            except Exception as e:
                if is_not_found(e):
                    continue
                raise
            plan.spec.zones = [zone]
            links = list(dict(res.resource_policies).values())
            if links:
                plan.adopt_reservation_policies(links)
                self.report.note(f"reservation {res.name} ({zone}) carries placement policy "
                                 f"{', '.join(x.rsplit('/', 1)[-1] for x in links)}: the nodes use it")
            return
        raise CloudError(f"--reservation {plan.spec.reservation}: no such reservation in "
                         f"{', '.join(plan.zones)} of project {self.project}")

    def _ensure_shared(self, plan: Plan, obs: Observed, created: Created, cv1: Any) -> None:
        """Placement policy, networks, subnets and firewalls: regional/global, shared by every zone attempt."""
        region = plan.region
        ops = []
        if plan.policy and plan.policy["name"] not in {p["name"] for p in obs.policies}:
            self.report.step("policy", f"Creating compact placement policy {plan.policy['name']} in {region}")
            ops.append(call(self.c("ResourcePoliciesClient").insert, {
                "project": self.project, "region": region,
                "resource_policy_resource": _msg(cv1.ResourcePolicy, self._own(plan.policy))}))
            created.policy = (region, plan.policy["name"])
        new_nets = [n for n in plan.networks if n["name"] not in obs.networks]
        if new_nets:
            self.report.step("networks", f"Creating {len(new_nets)} GPU NIC network(s) (gVNIC, MTU "
                                         f"{new_nets[0]['mtu']})")
        results = parallel(lambda n: call(self.c("NetworksClient").insert, {
            "project": self.project, "network_resource": _msg(cv1.Network, self._own(n))}), new_nets)
        self._raise_first(results)
        created.networks += [n["name"] for n in new_nets]
        ops += results
        # The NAT sits on the primary network, which exists already: it goes with the first batch.
        nat_later = any(r["network"].rsplit("/", 1)[-1] in {n["name"] for n in new_nets} for r in plan.routers)
        if not nat_later:
            ops += self._ensure_nat(plan, obs, created, cv1)
        with self.report.waiting("waiting for the placement policy, networks and Cloud NAT"):
            self._wait_all_or_raise(ops)

        have_subnets = {s["name"] for s in obs.subnets}
        new_subs = [s for s in plan.subnets if s["name"] not in have_subnets]
        new_fws = [f for f in plan.firewalls if f["name"] not in obs.firewalls]
        if new_subs or new_fws:
            self.report.step("subnets", f"Creating {len(new_subs)} subnetwork(s) and {len(new_fws)} internal-only "
                                        "firewall rule(s)")
        sub_ops = parallel(lambda s: call(self.c("SubnetworksClient").insert, {
            "project": self.project, "region": region, "subnetwork_resource": _msg(cv1.Subnetwork, self._own(s))}), new_subs)
        fw_ops = parallel(lambda f: call(self.c("FirewallsClient").insert, {
            "project": self.project, "firewall_resource": _msg(cv1.Firewall, self._own(f))}), new_fws)
        self._raise_first(sub_ops + fw_ops)
        created.subnets += [(region, s["name"]) for s in new_subs]
        created.firewalls += [f["name"] for f in new_fws]
        with self.report.waiting("waiting for subnetworks and firewall rules"):
            self._wait_all_or_raise(sub_ops + fw_ops)
        if nat_later:
            with self.report.waiting("waiting for the Cloud NAT"):
                self._wait_all_or_raise(self._ensure_nat(plan, obs, created, cv1))

    def _ensure_nat(self, plan: Plan, obs: Observed, created: Created, cv1: Any) -> list[Any]:
        """Start the nodes' Cloud NAT, unless the cluster has it or the network already has a NAT in the
        region; the operations to wait for."""
        have = {r["name"] for r in obs.routers}
        todo = [r for r in plan.routers if r["name"] not in have]
        if not todo:
            return []
        network = todo[0]["network"].rsplit("/", 1)[-1]
        pager = retrying()(self.c("RoutersClient").list)(request={"project": self.project, "region": plan.region})
        serving = [f"{r.name}/{n.name}" for r in pager if r.network.rsplit("/", 1)[-1] == network for n in r.nats]
        if serving:
            self.report.note(f"network {network} already has Cloud NAT {serving[0]} in {plan.region}: using it")
            return []
        self.report.step("nat", f"Creating Cloud Router {todo[0]['name']} with a Cloud NAT on {network} in "
                                f"{plan.region} (nodes have no external IP)")
        op = call(self.c("RoutersClient").insert, {"project": self.project, "region": plan.region,
                                                   "router_resource": _msg(cv1.Router, self._own(todo[0]))})
        created.routers.append((plan.region, todo[0]["name"]))
        return [op]

    @staticmethod
    def _raise_first(results: list[Any]) -> None:
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def _place_nodes(self, plan: Plan, obs: Observed, missing: list[str], zones: list[str], created: Created,
                     cv1: Any) -> str:
        """Try each candidate zone in turn; return the zone that took every missing node."""
        failures: list[tuple[str, Failure]] = []
        for zone in zones:
            failure = self._try_zone(plan, obs, missing, zone, created, cv1)
            if failure is None:
                return zone
            if failure.kind == "quota":
                raise QuotaExceeded(self._quota_message(plan, failure, len(missing)))
            if failure.kind != "stockout":
                raise CloudError(f"creating {len(missing)} x {plan.machine.name} in {zone} failed: "
                                 f"{failure.code or ''} {'/'.join(failure.reasons)}: {failure.message}".strip())
            failures.append((zone, failure))
            self.report.note(f"{zone}: no capacity ({failure.reasons[0] if failure.reasons else failure.code}); "
                             + ("trying the next zone" if zone != zones[-1] else "no zones left"))
        tried = ", ".join(z for z, _ in failures)
        raise NoCapacity(
            f"no capacity for {len(missing)} x {plan.machine.name} in {tried}: nothing was left behind; try "
            "--region with other zones, fewer --nodes, --spot, --flex-start DURATION, or a reservation")

    def _try_zone(self, plan: Plan, obs: Observed, missing: list[str], zone: str, created: Created,
                  cv1: Any) -> Failure | None:
        """One zone attempt: reservation (if asked) + one bulkInsert. None on success."""
        made_reservation = None
        if plan.reservation and not any(r["name"] == plan.reservation["name"] for r in obs.reservations):
            self.report.step("reservation", f"Creating reservation {plan.reservation['name']} "
                                            f"({plan.spec.nodes} x {plan.machine.name}) in {zone}")
            try:
                self._wait(call(self.c("ReservationsClient").insert, {
                    "project": self.project, "zone": zone,
                    "reservation_resource": _msg(cv1.Reservation, self._own(plan.reservation))}))
                made_reservation = (zone, plan.reservation["name"])
                created.reservations.append(made_reservation)
            except Exception as e:
                if not _is_google(e):
                    raise
                return classify(e, from_operation=True)

        if plan.flex_start:
            from .flex import place_flex

            return place_flex(self, plan, missing, zone, created)
        self.report.step("instances", f"Creating {len(missing)} x {plan.machine.name} in {zone} "
                                      "(one instances.bulkInsert)")
        body = _msg(cv1.BulkInsertInstanceResource, self._own(plan.bulk_insert_body(missing)))
        try:
            op = call(self.c("InstancesClient").bulk_insert, {
                "project": self.project, "zone": zone, "bulk_insert_instance_resource_resource": body})
            with self.report.waiting(f"waiting for bulkInsert in {zone}"):
                self._wait(op)
        except Exception as e:
            if not _is_google(e):
                raise
            failure = classify(e, from_operation=True)
            if failure.kind == "transient":
                failure = Failure("stockout", failure.reasons, failure.message, failure.code)  # 503s that never end
            self._clean_zone(plan, zone, missing, made_reservation, created)
            return failure
        created.instances += [(zone, n) for n in missing]
        return None

    def _clean_zone(self, plan: Plan, zone: str, missing: list[str], reservation: tuple[str, str] | None,
                    created: Created) -> None:
        """After a failed attempt, remove whatever it left in the zone (bulkInsert may place some VMs)."""
        leftovers = [n for n in list_nodes(self.clients, self.project, f"labels.{LABEL_CLUSTER} = {plan.name}")
                     if n.name in missing and n.zone.endswith(zone) and n.labels.get(LABEL_ATTEMPT) == self.attempt]
        if leftovers:
            self.report.note(f"{zone}: removing {len(leftovers)} VM(s) the failed attempt left")
            self._delete_instances([(zone, n.name) for n in leftovers])
        if reservation:
            self._delete_all("ReservationsClient", [reservation], "zone", "reservation")
            created.reservations.remove(reservation)

    def _wait_running(self, plan: Plan) -> list[Node]:
        """Poll the cluster's nodes with one list call per round until all are RUNNING."""
        deadline = time.monotonic() + RUNNING_TIMEOUT
        want = set(plan.node_names)
        self.report.step("running", f"Waiting for {len(want)} node(s) to be RUNNING")
        with self.report.waiting("waiting for nodes") as update:
            while True:
                if self.lease is not None:
                    self.lease.check()
                nodes = [n for n in observe_nodes(self.clients, self.project, plan.name) if n.name in want]
                gone = sorted(want - {n.name for n in nodes})
                if gone:  # relabelled by hand is not gone: look once by name before failing
                    nodes += [n for n in observe_nodes_by_name(self.clients, self.project, plan.name)
                              if n.name in gone]
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

    def _quota_message(self, plan: Plan, failure: Failure, count: int) -> str:
        metric, limit, region = failure.quota_metric, failure.quota_limit, failure.quota_region or plan.region
        usage = None
        if metric:
            with contextlib.suppress(Exception):
                reg = self.c("RegionsClient").get(project=self.project, region=region)
                for q in reg.quotas:
                    if q.metric == metric:
                        usage, limit = q.usage, q.limit
        need = count * (plan.machine.gpu_count if metric and metric.endswith("GPUS") else plan.machine.vcpus)
        head = f"quota {metric or 'exceeded'}" + (f" in {region}" if region else "")
        numbers = []
        if limit is not None:
            numbers.append(f"limit {limit:g}")
        if usage is not None:
            numbers.append(f"in use {usage:g}")
        if metric:
            numbers.append(f"this cluster needs {need:g} more")
        where = (f"https://console.cloud.google.com/iam-admin/quotas?project={self.project}"
                 + (f"&metric={metric}" if metric else ""))
        return f"{head} is too low ({', '.join(numbers)}): nothing was left behind; ask for more at {where}"

    # ------------------------------------------------------------------ down
    def down(self, name: str, keep_reservation: bool = False, wait_for_lease: bool = True) -> Observed:
        """Delete everything of cluster `name` under its lease; returns what was found.

        Keeps going past failures; raises (one line per resource) only if something is left.
        """
        self.attempt = new_attempt_id()
        with self._holding(name, "down", wait_for_lease):
            return self._down(name, keep_reservation)

    def _down(self, name: str, keep_reservation: bool) -> Observed:
        self.report.step("observe", f"Looking for resources of cluster {name} (by label, name and marker)")
        obs = observe(self.clients, self.project, name)
        if obs.empty:
            self.report.note(f"nothing to delete: no resources of cluster {name} in project {self.project}")
            return obs
        self.report.note(f"found {obs.summary()}")
        todo = copy.copy(obs)
        if keep_reservation:
            todo.reservations = []
            if obs.reservations and obs.policies:
                # A kept reservation holds its placement policy: GCP refuses to delete a policy in use.
                self.report.note(f"keeping reservation(s) {', '.join(r['name'] for r in obs.reservations)} and the "
                                 f"placement policy they use ({', '.join(p['name'] for p in obs.policies)})")
                todo.policies = []
        todo.routers, nat_notes = settle_nats(self.clients, self.project, name, obs)
        for line in nat_notes:
            self.report.note(line)
        with self.report.waiting(f"deleting cluster {name}"):
            lines = delete_observed(self.clients, self.project, todo, self.report.step)
        left = observe(self.clients, self.project, name)
        left.routers = [r for r in left.routers if r in todo.routers]  # a NAT kept for other VMs is not "left"
        if keep_reservation:
            left.reservations = []
            if obs.reservations:
                left.policies = []
        obs = copy.copy(obs)
        obs.routers = todo.routers  # what was deleted: a NAT kept for other VMs is not reported as gone
        named = " ".join(lines)
        lines += [f"{what} {n}: still exists after down" for what, n in _names(left) if f" {n}" not in f" {named}"]
        if lines:
            raise CloudError(f"cluster {name}: {len(lines)} resource(s) could not be deleted; run "
                             f"'gcpgpu cluster down {name}' again once the cause is fixed:\n  " + "\n  ".join(lines))
        return obs

    def shrink(self, name: str, nodes: int, wait_for_lease: bool = True) -> list[Node]:
        """Keep ranks 0..nodes-1 and delete the rest; the shared resources stay. Returns the nodes deleted.
        Under the cluster's lease, like `up` and `down`."""
        self.attempt = new_attempt_id()
        with self._holding(name, "down", wait_for_lease):
            return self._shrink(name, nodes)

    def _shrink(self, name: str, nodes: int) -> list[Node]:
        found = observe_nodes(self.clients, self.project, name)
        gone = [n for n in found if n.rank is None or n.rank >= nodes]
        if not gone:
            self.report.note(f"cluster {name} has {len(found)} node(s): nothing to remove for --nodes {nodes}")
            return []
        self.report.step("instances", f"Deleting {len(gone)} node(s) beyond --nodes {nodes}: "
                                      f"{', '.join(n.name for n in gone[:5])}{' ...' if len(gone) > 5 else ''}")
        with self.report.waiting("waiting for nodes to be deleted"):
            self._delete_instances([(n.zone, n.name) for n in gone])
        self._set_size([n for n in found if n not in gone], nodes)
        return gone

    def _set_size(self, kept: list[Node], nodes: int) -> None:
        """The kept nodes' `gcpgpu-nodes` metadata says the new size, so `status` does not report the
        removed nodes as missing."""
        from google.cloud import compute_v1

        client = self.c("InstancesClient")

        def put(n: Node) -> Any:
            inst = client.get(project=self.project, zone=n.zone, instance=n.name)
            items = [compute_v1.Items(key=i.key, value=i.value) for i in inst.metadata.items if i.key != "gcpgpu-nodes"]
            items.append(compute_v1.Items(key="gcpgpu-nodes", value=str(nodes)))
            return call(client.set_metadata, {"project": self.project, "zone": n.zone, "instance": n.name,
                                              "metadata_resource": compute_v1.Metadata(
                                                  fingerprint=inst.metadata.fingerprint, items=items)})

        ops = parallel(put, kept)
        self._raise_first(ops)
        self._wait_all_or_raise(ops)

    def _delete_instances(self, items: list[tuple[str, str]]) -> None:
        self._delete_all("InstancesClient", items, "zone", "instance")

    def _delete_all(self, client_name: str, items: list[tuple[str | None, str]], scope: str | None,
                    field_name: str) -> None:
        """Delete in parallel and wait; a resource already gone counts as deleted; raise the first error."""
        errors = [e for e in delete_batch(self.clients, self.project, client_name, scope, field_name, items) if e]
        if errors:
            raise errors[0]

    def _rollback(self, cluster: str) -> None:
        """Take back exactly what this attempt created, found by the attempt id it wrote on each resource.

        That includes the members of a parallel batch whose calls succeeded while another failed, and
        never anything another run created. Best effort: one line per resource it could not delete.
        """
        try:
            mine = observe(self.clients, self.project, cluster).owned_by(self.attempt)
        except Exception as e:
            self.report.note(f"cleanup incomplete: could not list what this attempt created ({one_line(e)}); "
                             f"'gcpgpu cluster down {cluster}' finds it by name and label")
            return
        if mine.empty:
            return
        self.report.step("rollback", f"Removing what this attempt created ({mine.summary()})")
        for line in delete_observed(self.clients, self.project, mine):
            self.report.note(f"cleanup incomplete: {line}")

    # ------------------------------------------------------------------ status
    def status(self, name: str) -> Observed:
        return observe(self.clients, self.project, name)


def _names(obs: Observed) -> list[tuple[str, str]]:
    """(kind, name) of everything in obs, for messages, in teardown order."""
    return [(word, name) for kind, _c, _s, _f, word in ORDER for _where, name in items_of(obs, kind)]


def _is_google(exc: BaseException) -> bool:
    from gcpgpu.errors import is_google_error

    return is_google_error(exc)
