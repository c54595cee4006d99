"""`gcpgpu cluster autostop NAME DURATION|--cancel`: set or cancel a cluster's autostop (cluster/autostop.py)."""

from __future__ import annotations

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings


@click.command()
@click.argument("name")
@click.argument("duration", required=False)
@click.option("--down", is_flag=True, help="Delete the cluster (as 'cluster down') instead of stopping it.")
@click.option("--cancel", is_flag=True, help="Turn autostop off.")
@click.pass_obj
def autostop(settings: Settings, name: str, duration: str | None, down: bool, cancel: bool) -> None:
    """Stop (or, with --down, delete) cluster NAME once it has been idle for DURATION (1m to 30d).

    \b
    Idle: no job running and every GPU under the idle floor 'gcpgpu metrics' uses. Judged on the
    cluster itself by the follower its nodes run (one leads), so nothing needs to stay up here:
      gcpgpu cluster autostop mycluster 30m --down
      gcpgpu cluster autostop mycluster --cancel
    """
    from gcpgpu.cluster import autostop as auto
    from gcpgpu.cluster.names import check_cluster_name
    from gcpgpu.cluster.observe import observe_nodes
    from gcpgpu.cluster.session import Session
    from gcpgpu.errors import CloudError

    check_cluster_name(name)
    if cancel and (duration or down):
        raise UsageProblem("--cancel turns autostop off: give it without DURATION or --down")
    if not cancel and not duration:
        raise UsageProblem("give DURATION (e.g. 'gcpgpu cluster autostop NAME 30m') or --cancel")
    idle_s = None if cancel else auto.parse(duration, "DURATION")
    if not observe_nodes(settings.clients, settings.project, name):  # before the lease: nothing written
        raise CloudError(f"no cluster named {name} in project {settings.project} (see 'gcpgpu cluster list')")
    s = Session(settings.clients, settings.project)
    with s.holding(name, "autostop", wait_for_lease=True):
        nodes = auto.set_on(settings.clients, settings.project, name, idle_s, down, s.check_lease)
    value = auto.setting(idle_s, down)
    if settings.format != "table":
        emit({"cluster": name, "autostop": value, "nodes": len(nodes)})
    elif value is None:
        info(f"Cluster {name}: autostop off.")
    else:
        info(f"Cluster {name}: {'deleted' if down else 'stopped'} once idle for {auto.shown(value).split(' ')[0]} "
             f"(judged on its {len(nodes)} node(s)).")
