"""`gcpgpu cluster`: compact-placed GPU clusters that come up fast, fail over, and leave nothing behind.

The group and its lifecycle commands (plan, up, down, status, list); working on the nodes (nodes.py); node health (doctor, repair)
and autostop are commands of their own modules, added to the group at the end of this one.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from gcpgpu.errors import CloudError, Interrupted, UsageProblem
from gcpgpu.output import Column, emit, info
from gcpgpu.settings import Settings

from .autostop import autostop, autostop_options, check_hourly_cost
from .doctor import doctor, repair
from .flags import build_spec, spec_options
from .nodes import forward, ssh, ssh_config

# The columns `status`, `list` and `up` show; their formatters import cluster/ only when a table is printed.
NODE_COLUMNS = [("name", "NAME"), ("zone", "ZONE"), ("internal_ip", "INTERNAL IP"), ("status", "STATUS"),
                ("gpus", "GPUS"), ("rank", "RANK"), ("block", "BLOCK"), ("subblock", "SUB-BLOCK")]


def _uptime(value: Any) -> str:
    from gcpgpu.cluster.cost import shown_uptime

    return shown_uptime(value)


def _money(value: Any) -> str:
    from gcpgpu.cluster.cost import shown_cost

    return shown_cost(value)


def _autostop(value: Any) -> str:
    from gcpgpu.cluster.autostop import shown

    return shown(value)


# Node-hours since each node's last start x the catalog's hourly price ('-': no price, or not running).
COST_COLUMNS = [Column("uptime_s", "UPTIME", justify="right", format=_uptime),
                Column("cost_usd", "COST SO FAR", justify="right", format=_money)]
AUTOSTOP_COLUMN = Column("autostop", "AUTOSTOP", format=_autostop)


def _check_name(name: str) -> None:
    from gcpgpu.cluster.names import check_cluster_name

    check_cluster_name(name)


def _show_plan(plan: Any, table: bool = True) -> None:
    if table:
        from gcpgpu.output import current_format, footnote_sources

        rows, sources = plan.resources(), None
        if current_format() == "table":  # sources as numbered notes under the table; JSON/YAML keep them inline
            rows, sources = footnote_sources(rows)
        emit(rows, [("kind", "RESOURCE"), ("name", "NAME"), ("where", "WHERE"), ("details", "DETAILS")],
             title=f"Plan for cluster {plan.name}", caption=sources, max_width=120)
    from gcpgpu.cluster.cost import price_note

    cost = plan.cost_per_hour
    price = (f"about ${cost:,.2f}/hour ({plan.spec.provisioning}, {price_note(plan.machine.name, plan.region, fetch=False)})"
             if cost is not None else f"hourly cost unknown (no {plan.spec.provisioning} price in {plan.region})")
    info(f"{plan.spec.nodes} x {plan.machine.name} = {plan.gpus} x {plan.machine.gpu.model}; {price}")
    for note in plan.notes:
        info(f"note: {note}")


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageProblem(f"{question.rstrip('?')}: pass --yes to confirm when not running interactively")
    if not click.confirm(question, default=False, err=True):
        raise click.Abort()


@click.group()
def cluster() -> None:
    """Create, inspect and delete compact-placed A2/A3/A4 GPU clusters."""


@cluster.command()
@spec_options
@click.pass_obj
def plan(settings: Settings, **kw: Any) -> None:
    """Show what `cluster up` would create, and its hourly cost, without touching the cloud."""
    from gcpgpu.cluster.plan import plan as make_plan
    from gcpgpu.image.default import fill_prepull
    from gcpgpu.image.follower import fill_follower_image

    spec = build_spec(settings, kw)
    fill_follower_image(settings, spec, dry_run=True, say=info)
    fill_prepull(settings, spec, dry_run=True, say=info)
    p = make_plan(spec, settings.project)
    if settings.format != "table":
        emit(p.to_dict())
        return
    _show_plan(p)


@cluster.command()
@spec_options
@autostop_options
@click.option("--dry-run", is_flag=True, help="Print the plan and exit (same as 'cluster plan').")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-wait", is_flag=True, help="If another up/down of this cluster is running, exit 1 instead of waiting.")
@click.option("--wait-for-start", is_flag=True,
              help="--reservation names a future reservation: wait (with progress) until its window opens.")
@click.option("--check", is_flag=True,
              help="Before declaring the cluster ready, run 'cluster doctor --active' diagnostics and replace "
                   "failing nodes (their ranks kept).")
@click.pass_obj
def up(settings: Settings, dry_run: bool, yes: bool, no_wait: bool, wait_for_start: bool, check: bool,
       **kw: Any) -> None:
    """Create a GPU cluster (or complete one that exists) and wait until every node is RUNNING.

    Creates a compact placement policy, the GPU NIC networks the family needs (A3: gVNIC VPCs;
    A3 Ultra/A4: a second gVNIC VPC and a RoCE VPC), internal-only firewall rules, a Cloud NAT
    for internal nodes, an optional reservation, then all nodes in ONE instances.bulkInsert per
    zone (--flex-start: one instances.insert per node, queued). On a stockout it cleans that zone
    and tries the next; on a quota error it stops and removes what it created. Re-running it
    creates only what is missing, or adds nodes when --nodes grew.
    """
    from gcpgpu.cli.progress import ConsoleReporter
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.plan import plan as make_plan
    from gcpgpu.image.default import fill_prepull
    from gcpgpu.image.follower import fill_follower_image

    spec = build_spec(settings, kw)
    if wait_for_start and not spec.reservation:
        raise UsageProblem("--wait-for-start needs --reservation NAME (a future reservation to wait for)")
    project = settings.project
    check_hourly_cost(make_plan(spec, project), kw.get("max_hourly_cost"))  # a pure plan: before any call
    # A re-run keeps the file systems the cluster has, unless told (README, "Shared storage"). Not read when
    # _confirm is sure to refuse (no --yes, no terminal): that refusal makes no call.
    if not dry_run and (yes or sys.stdin.isatty()):
        from gcpgpu.cluster.shared_fs import keep, refuse_if_shared

        for line in keep(settings.clients, project, spec):
            info(line)
        if spec.remove:
            refuse_if_shared(settings.clients, project, spec.name, tuple(k for k in spec.remove if k != "hyperdisk-ml"),
                             override="leave the flag out to keep it")
    fill_follower_image(settings, spec, dry_run=dry_run, say=info)  # before any change: none built stops here
    fill_prepull(settings, spec, dry_run=True, say=info)  # this machine's record; the registry once confirmed
    p = make_plan(spec, project)
    if dry_run:
        if settings.format != "table":
            emit(p.to_dict())
        else:
            _show_plan(p)
        return
    if settings.format == "table":
        _show_plan(p, table=not yes)  # asked to confirm: show everything; --yes: the summary line
    cost = f" (about ${p.cost_per_hour:,.2f}/hour)" if p.cost_per_hour is not None else ""
    _confirm(yes, f"Create cluster {p.name} with {p.gpus} GPUs{cost}?")
    if spec.prepull is None:  # nothing here: Artifact Registry's newest gcpgpu image, as submit would find it
        fill_prepull(settings, spec, dry_run=False, say=info)
        p = make_plan(spec, project) if spec.prepull is not None else p
    if wait_for_start:
        from gcpgpu.cluster.reservations import wait_for_plan

        wait_for_plan(settings.clients, project, p, info)
    try:
        runner = Cluster(settings.clients, project, ConsoleReporter())
        nodes = runner.up(p, wait_for_lease=not no_wait)
        if check:
            from gcpgpu.cluster.check import check_and_replace

            nodes = check_and_replace(runner, p, nodes, info)
    except KeyboardInterrupt:
        raise Interrupted(f"Everything created so far is named and labelled for cluster {p.name}: run "
                          f"'gcpgpu cluster up {p.name} ...' again to resume, or 'gcpgpu cluster down {p.name}' to "
                          "remove it.") from None
    if spec.max_spend is not None:  # nodes an earlier `up` made carry no cap, or another one
        from gcpgpu.cluster import spend

        if spend.put_on(settings.clients, project, p.name, spec.max_spend, spec.autostop_notify, spec.agent_image):
            info(f"Cluster {p.name}: max spend ${spec.max_spend:,.2f} set on its nodes")
    emit([n.row() for n in nodes], NODE_COLUMNS, title=f"Cluster {p.name}: {len(nodes)} node(s) RUNNING")


@cluster.command()
@click.argument("name")
@click.option("--keep-reservation", is_flag=True, help="Keep the reservation the cluster created.")
@click.option("--nodes", "keep_nodes", type=int, metavar="N",
              help="Shrink instead: keep ranks 0..N-1, delete the other nodes, keep everything else.")
@click.option("--force-storage", is_flag=True,
              help="Delete the cluster's file systems even where another cluster mounts them (that cluster's jobs "
                   "lose them).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-wait", is_flag=True, help="If another up/down of this cluster is running, exit 1 instead of waiting.")
@click.pass_obj
def down(settings: Settings, name: str, keep_reservation: bool, keep_nodes: int | None, force_storage: bool,
         yes: bool, no_wait: bool) -> None:
    """Delete a cluster: nodes, then reservation, placement policy, firewall rules and networks.

    Finds everything from GCP itself (labels and names), so it works from any machine, after an
    interrupted `up`, and again after a `down` (nothing left is not an error).
    """
    from gcpgpu.cli.progress import ConsoleReporter
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.specfile import check_option_values

    check_option_values(click.get_current_context())
    _check_name(name)
    if keep_nodes is not None and keep_nodes < 1:
        raise UsageProblem(f"--nodes {keep_nodes} must be at least 1 (to delete the whole cluster, leave --nodes out)")
    project = settings.project
    if keep_nodes is not None:
        _shrink(settings, project, name, keep_nodes, yes, no_wait)
        return
    _confirm(yes, f"Delete cluster {name} in project {project}?")
    if not force_storage:  # before anything is deleted: another cluster's jobs would lose their files
        from gcpgpu.cluster.shared_fs import refuse_if_shared

        refuse_if_shared(settings.clients, project, name)
    from gcpgpu.costs import ledger

    spent = ledger.snapshot_or_none(settings.clients, project, name, info)  # before its nodes and job records go
    try:
        found = Cluster(settings.clients, project, ConsoleReporter()).down(name, keep_reservation=keep_reservation,
                                                                           wait_for_lease=not no_wait)
    except KeyboardInterrupt:
        ledger.keep_if_gone(settings.clients, project, name, spent, "cluster down")
        raise Interrupted(f"Run 'gcpgpu cluster down {name}' again to finish.") from None
    except CloudError:  # something besides the nodes was left: the nodes' cost is still the cluster's
        ledger.keep_if_gone(settings.clients, project, name, spent, "cluster down")
        raise
    ledger.keep_if_gone(settings.clients, project, name, spent, "cluster down", found.nodes)
    dashboards = _delete_dashboards(settings, project, name)
    from gcpgpu.jobs.cluster.follower import forget

    forget(settings.clients, project, name)  # its followers' lease and any unfinished recovery went with it
    from gcpgpu.cluster.sshconfig import config_path, remove

    if remove(name, project):  # `cluster ssh-config --write`'s entries name nodes that are gone
        info(f"Removed cluster {name}'s hosts from {config_path()}.")
    if settings.format != "table":
        emit({"cluster": name, "deleted": found.count() + len([h for h in found.held if not h.attached]),
              "found": found.summary() if not (found.empty and not found.held) else "nothing",
              "dashboards_deleted": dashboards})
    elif not (found.empty and not found.held):
        info(f"Cluster {name} is gone ({found.summary()} deleted).")


def _shrink(settings: Settings, project: str, name: str, nodes: int, yes: bool, no_wait: bool) -> None:
    from gcpgpu.cli.progress import ConsoleReporter
    from gcpgpu.cluster.apply import Cluster

    _confirm(yes, f"Delete the nodes of cluster {name} with rank {nodes} and above?")
    try:
        gone = Cluster(settings.clients, project, ConsoleReporter()).shrink(name, nodes, wait_for_lease=not no_wait)
    except KeyboardInterrupt:
        raise Interrupted(f"Run 'gcpgpu cluster down {name} --nodes {nodes}' again to finish.") from None
    if settings.format != "table":
        emit({"cluster": name, "nodes": nodes, "deleted": [n.name for n in gone]})
    else:
        info(f"Cluster {name}: deleted {len(gone)} node(s); {nodes} kept.")


def _delete_dashboards(settings: Settings, project: str, name: str) -> list[str]:
    """The cluster's Cloud Monitoring dashboards go with it (best effort: a teardown that removed every
    billable resource does not fail over a dashboard)."""
    from gcpgpu.errors import is_google_error
    from gcpgpu.metrics import dashboard

    try:
        gone = dashboard.delete(settings.clients, project, name)
    except Exception as e:
        if not is_google_error(e):
            raise
        info(f"note: could not delete cluster {name}'s dashboards ({e}); "
             f"run 'gcpgpu metrics dashboard delete --cluster {name}'")
        return []
    if gone:
        info(f"Deleted {len(gone)} dashboard(s) of cluster {name}.")
    return gone


@cluster.command()
@click.argument("name")
@click.pass_obj
def status(settings: Settings, name: str) -> None:
    """Show a cluster's nodes, their state and GPUs, placement policy and reservation use."""
    from gcpgpu.cluster import autostop as auto
    from gcpgpu.cluster import cost, holdings, lease
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.observe import problems

    _check_name(name)
    obs = Cluster(settings.clients, settings.project).status(name)
    obs.held = holdings.of_cluster(settings.clients, settings.project, name, obs.nodes)
    obs.scheduler = holdings.scheduler(obs.nodes, obs.held)
    if obs.empty and not obs.held:
        from gcpgpu.cluster.unknown import missing

        raise missing(settings.clients, settings.project, name)
    flagged = problems(obs)
    holder = lease.current(settings.clients, settings.project, name)
    rows, spent = cost.node_rows(obs.nodes)
    stop_after = auto.of(obs.nodes)
    capped = _spend_cap(settings, name, obs.nodes)
    if settings.format != "table":
        emit({"cluster": name, "nodes": rows, "autostop": auto.public(stop_after), "max_spend": capped,
              "placementPolicies": obs.policies,
              "reservations": obs.reservations, "networks": obs.networks, "subnetworks": obs.subnets,
              "firewalls": obs.firewalls, "routers": obs.routers, "problems": flagged,
              "busy": lease.describe(holder) if holder else None, **spent,
              "scheduler": obs.scheduler, "storage": [h.row() for h in obs.held]})
        return
    emit(rows, [*NODE_COLUMNS, *COST_COLUMNS], title=f"Cluster {name}", empty="No nodes.")
    info(cost.cost_line(obs.nodes, spent) + holdings.cost_words(obs.held) + f"; autostop {auto.shown(stop_after)}")
    if capped:
        info(f"max spend ${capped['usd']:,.2f}" + (f"; stopped at {capped['stopped']}: {capped['why']}"
                                                   if capped.get("stopped") else ""))
    if obs.scheduler:
        info(f"scheduler: {obs.scheduler}")
    for h in obs.held:
        where = f" in {h.location}" if h.location else ""
        price = "not billed to this cluster" if h.attached else f"cost so far {holdings.price_note(h.kind)}"
        info(f"storage: {h.words()}{where}; {price}")
    for p in obs.policies:
        used = sum(1 for n in obs.nodes)
        room = f"{used}/{p['vm_count']} VMs" if p["vm_count"] else f"{used} VM(s), no vmCount"
        info(f"placement policy {p['name']} ({p['region']}): COLLOCATED, {room}")
    for r in obs.reservations:
        info(f"reservation {r['name']} ({r['zone']}): {r['in_use']}/{r['count']} in use")
    for n in obs.nodes:
        if n.maintenance:
            m = n.maintenance
            info(f"maintenance: {n.name} {m['type'].lower()} {m['status']}, window {m['window_start']} to "
                 f"{m['window_end']}" + (" (can be rescheduled)" if m["can_reschedule"] else ""))
    if obs.networks:
        info(f"{len(obs.networks)} GPU NIC network(s), {len(obs.firewalls)} firewall rule(s)")
    for r in obs.routers:
        info(f"Cloud NAT router {r['name']} ({r['region']}): outbound for the nodes")
    if holder:
        info(f"busy: {lease.describe(holder)}")
    for line in flagged:
        info(f"problem: {line}")
    if flagged:
        info(f"'gcpgpu cluster up {name} ...' again repairs labels and re-creates missing nodes")


def _spend_cap(settings: Settings, name: str, nodes: list[Any]) -> dict[str, Any] | None:
    """The cluster's --max-spend and what its leader did about it this run (warned, stopped, why); never
    its webhooks (a URL may hold a token). None without a cap."""
    from gcpgpu.cluster import spend
    from gcpgpu.jobs.cluster import spendcap

    cap = spend.of(nodes)
    if not cap:
        return None
    seen = spendcap.marks(settings.clients, settings.project, name)
    done = {k: seen[k] for k in ("warned", "stopped", "spent_usd", "why") if k in seen} \
        if seen.get("since") == spendcap.run_since(nodes) else {}
    return {"usd": float(cap["usd"]), **done}


@cluster.command("list")
@click.option("--mine", is_flag=True, help="Only the clusters you made (the identity of your credentials).")
@click.option("--user", "user", metavar="EMAIL", help="Only the clusters this person or service account made.")
@click.pass_obj
def list_cmd(settings: Settings, mine: bool, user: str | None) -> None:
    """List the project's gcpgpu clusters, half-built ones included (one list call per resource kind)."""
    from gcpgpu.cli.options import wanted_user
    from gcpgpu.cluster.observe import list_clusters
    from gcpgpu.gcp import identity

    wanted = wanted_user(settings, mine, user)
    project = settings.project
    rows = list_clusters(settings.clients, project)
    if wanted is not None:
        rows = [r for r in rows if identity.matches(r.get("owner"), wanted)]
    emit(rows, [("cluster", "CLUSTER"), ("machine_type", "MACHINE TYPE"), ("nodes", "NODES"), ("gpus", "GPUS"),
                ("zones", "ZONE"), Column("status", "STATUS", wrap=48), COST_COLUMNS[0], Column("cost", "COST SO FAR", justify="right"),
                ("scheduler", "SCHEDULER"), ("owner", "MADE BY"), ("storage", "STORAGE"), AUTOSTOP_COLUMN],
         empty=f"No gcpgpu clusters in project {project}" + (f" made by {wanted}." if wanted else "."))


cluster.add_command(ssh)
cluster.add_command(forward)
cluster.add_command(ssh_config)
cluster.add_command(autostop)
cluster.add_command(doctor)
cluster.add_command(repair)
