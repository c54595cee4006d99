"""`gcpgpu cluster autostop NAME DURATION|--cancel`: set or cancel a cluster's autostop (cluster/autostop.py);
and `cluster up`'s --autostop, --down and --notify, and its --max-spend and --max-hourly-cost."""

from __future__ import annotations

from functools import partial
from typing import Any

import click

from gcpgpu.cli.options import with_options
from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings

NOTIFY_HELP = ("POST one JSON message (AUTOSTOPPED: the cluster, stop or delete, idle since, its nodes) to this "
               "http(s) webhook when autostop acts (repeatable); stored on the nodes in plain text.")
UP_OPTIONS = [
    click.option("--autostop", metavar="DURATION", help="Stop the cluster once it has run no job, its GPUs idle, "
                 "for this long (1m to 30d), judged on the cluster itself: the laptop can be closed."),
    click.option("--down", "autostop_down", is_flag=True, default=None,
                 help="With --autostop: delete the cluster (as 'cluster down') instead of stopping it."),
    click.option("--notify", "autostop_notify", multiple=True, metavar="URL",
                 help=f"With --autostop or --max-spend: {NOTIFY_HELP} With --max-spend also SPEND_WARNING at 80 %."),
    click.option("--max-spend", metavar="USD", help="Once the cluster's cost so far reaches USD, the cluster's own "
                 "follower stops its job (checkpoint first) and then stops the cluster (cluster up starts it again, "
                 "counted from zero)."),
    click.option("--max-hourly-cost", metavar="USD", help="Refuse a plan that would cost more than USD per hour "
                 "(the catalog's price x nodes), before anything is created."),
]


autostop_options = with_options(*UP_OPTIONS)  # `cluster up`'s --autostop, --down and --notify


def autostop_flags(kw: dict[str, Any]) -> dict[str, Any]:
    """ClusterSpec fields from `cluster up`'s autostop flags (the spec checks --notify as job submit does)."""
    from gcpgpu.cluster.autostop import parse as parse_autostop

    flags: dict[str, Any] = {}
    if kw.get("autostop") is not None:
        flags["autostop"] = parse_autostop(kw["autostop"])
    if kw.get("autostop_down"):
        flags["autostop_down"] = True
    if kw.get("autostop_notify"):
        flags["autostop_notify"] = list(kw["autostop_notify"])
    if kw.get("max_spend") is not None:
        from gcpgpu.specfile import parse_usd

        flags["max_spend"] = parse_usd(kw["max_spend"], "--max-spend")
    return flags


def check_hourly_cost(plan: Any, value: str | None) -> None:
    """--max-hourly-cost: a plan whose hourly cost is over it, or unknown, is refused in one line."""
    if value is None:
        return
    from gcpgpu.specfile import parse_usd

    cap = parse_usd(value, "--max-hourly-cost")
    cost = plan.cost_per_hour
    if cost is None:
        raise UsageProblem(f"--max-hourly-cost ${cap:,.2f}: the catalog has no {plan.spec.provisioning} price for "
                           f"{plan.machine.name}, so the plan's hourly cost cannot be checked")
    if cost > cap:
        raise UsageProblem(f"--max-hourly-cost ${cap:,.2f}: the plan costs about ${cost:,.2f}/hour ({plan.spec.nodes} x "
                           f"{plan.machine.name}, {plan.spec.provisioning}); use fewer nodes, --spot, or a higher cap")


@click.command()
@click.argument("name")
@click.argument("duration", required=False)
@click.option("--down", is_flag=True, help="Delete the cluster (as 'cluster down') instead of stopping it.")
@click.option("--cancel", is_flag=True, help="Turn autostop off.")
@click.option("--notify", "notify", multiple=True, metavar="URL", help=NOTIFY_HELP)
@click.pass_obj
def autostop(settings: Settings, name: str, duration: str | None, down: bool, cancel: bool,
             notify: tuple[str, ...]) -> None:
    """Stop (or, with --down, delete) cluster NAME once it has been idle for DURATION (1m to 30d).

    \b
    Idle: no job running and every GPU under the idle floor 'gcpgpu metrics' uses. Judged on the
    cluster itself by the follower its nodes run (one leads), so nothing needs to stay up here:
      gcpgpu cluster autostop mycluster 30m --down --notify https://hooks.example.com/gcpgpu
      gcpgpu cluster autostop mycluster --cancel
    Each call sets the whole setting: --down and --notify not given are off.
    """
    from gcpgpu.cluster import autostop as auto
    from gcpgpu.cluster.names import check_cluster_name
    from gcpgpu.image.follower import follower_image

    check_cluster_name(name)
    if cancel and (duration or down or notify):
        raise UsageProblem("--cancel turns autostop off: give it without DURATION, --down or --notify")
    if not cancel and not duration:
        raise UsageProblem("give DURATION (e.g. 'gcpgpu cluster autostop NAME 30m') or --cancel")
    idle_s = None if cancel else auto.parse(duration, "DURATION")
    from gcpgpu.cluster.names import NoSuchCluster
    from gcpgpu.cluster.unknown import missing

    try:
        done = auto.change(settings.clients, settings.project, name, idle_s, down, list(notify),
                           partial(follower_image, settings, dry_run=False, say=info))
    except NoSuchCluster:
        raise missing(settings.clients, settings.project, name) from None  # with "did you mean"
    if settings.format != "table":
        emit({"cluster": name, "autostop": auto.public(done.value), "nodes": len(done.nodes)})
    elif done.value is None:
        info(f"Cluster {name}: autostop off.")
    else:
        info(f"Cluster {name}: {'deleted' if down else 'stopped'} once idle for "
             f"{auto.shown(done.value).split(' ')[0]} (judged on its {len(done.nodes)} node(s)).")
