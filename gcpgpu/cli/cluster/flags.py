"""The flags `cluster up` and `cluster plan` share, and the ClusterSpec they build from them (with a spec file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gcpgpu.cli.options import with_options
from gcpgpu.errors import UsageProblem
from gcpgpu.output import info
from gcpgpu.settings import Settings

from .autostop import autostop_flags
from .storage import storage_flags, storage_options


def spec_options(fn: Callable) -> Callable:
    """The options `up` and `plan` share (the same spec)."""
    options = [
        click.argument("name", required=False),
        click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False),
                     help="YAML spec (any option below as a key); flags override it."),
        click.option("--machine-type", help="GPU machine type, e.g. a3-highgpu-8g (see 'gcpgpu catalog')."),
        click.option("--nodes", type=int, help="Number of VMs (default 1)."),
        click.option("--zone", help="Create in this zone only."),
        click.option("--region", help="Region whose zones to try (all that offer the machine, in order)."),
        click.option("--zones", help="Comma-separated candidate zones, tried in order on stockouts."),
        click.option("--spot", is_flag=True, default=None, help="Spot VMs (preemptible, much cheaper)."),
        click.option("--flex-start", metavar="DURATION",
                     help="DWS flex-start VMs that run at most DURATION (10m..7d, e.g. 4h)."),
        click.option("--flex-wait", metavar="DURATION",
                     help="How long a --flex-start request waits for capacity (0, or 90s..2h; default 1h)."),
        click.option("--max-run-duration", metavar="DURATION",
                     help="Compute Engine ends each node this long after it starts, even with nobody "
                          "watching (30s..120d; e.g. 24h). Flex-start sets it with --flex-start."),
        click.option("--termination-action", metavar="delete|stop",
                     help="What ends the nodes at --max-run-duration: stop (default; disks kept, 'up' "
                          "restarts them) or delete. On Spot VMs it also applies to preemption."),
        click.option("--reservation", help="Consume this existing specific reservation."),
        click.option("--create-reservation", is_flag=True, default=None,
                     help="Create a reservation for the nodes (placement policy attached) and consume it."),
        click.option("--no-placement", is_flag=True, default=None, help="No compact placement policy."),
        click.option("--gpus", type=int, help="Check: GPUs per node you expect (the machine type fixes it)."),
        click.option("--image", help="Boot image path (default: the family's, see gcpgpu/data/machines.yaml `nodes`)."),
        click.option("--prepull", metavar="IMAGE|none",
                     help="Image the nodes pull while they boot, so jobs start warm (default: gcpgpu's image)."),
        click.option("--boot-disk-gb", type=int, help="Boot disk size in GB (default 200)."),
        click.option("--boot-disk-type", help="Boot disk type (default: the family's, e.g. pd-ssd on A3 High/Mega, hyperdisk-balanced on A3 Ultra/A4)."),
        click.option("--service-account", help="Service account e-mail for the nodes (default: the project's)."),
        click.option("--job-service-account", metavar="EMAIL",
                     help="Run jobs as this service account, not the nodes': their containers cannot reach the "
                          "metadata server, and get this account's token from gcpgpu's (README, \"Where the "
                          "security boundary is\")."),
        click.option("--scope", "scopes", multiple=True, help="OAuth scope for the nodes (repeatable)."),
        click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Label for the nodes (repeatable)."),
        click.option("--network", help="Primary VPC network (default: default)."),
        click.option("--subnetwork", help="Primary subnetwork (default: the network's in the region)."),
        click.option("--external-ip", "external_ips", is_flag=True, default=None,
                     help="Give nodes external IPs (default: none; nodes stay internal)."),
        click.option("--iap-ssh", is_flag=True, default=None,
                     help="Add a firewall rule so 'cluster ssh' can reach port 22 through IAP (35.235.240.0/20)."),
        click.option("--scheduler", metavar="slurm",
                     help="Run Slurm on the nodes: many jobs queue on the cluster, with priorities (README, "
                          "\"Many jobs on one cluster\")."),
        click.option("--no-host-tuning", "no_host_tuning", is_flag=True, default=None,
                     help="Leave the nodes' TCP settings as the image has them (default: 256 MiB TCP buffers, "
                          "netdev_max_backlog 250000 and window scaling, for the traffic that runs over TCP)."),
        click.option("--no-nat", "no_nat", is_flag=True, default=None,
                     help="No Cloud NAT for the nodes (default: one on the primary network unless it has one or "
                          "--external-ip; without it, nodes reach Google only through Private Google Access)."),
    ]
    return storage_options(with_options(*options)(fn))


def build_spec(settings: Settings, kw: dict[str, Any]) -> Any:
    """The validated ClusterSpec of `up`/`plan`: the spec file (-f), the flags over it; bad input is one line."""
    from gcpgpu.cluster.names import check_cluster_name
    from gcpgpu.cluster.spec import ClusterSpec, duration
    from gcpgpu.specfile import check_option_values, parse_pairs

    check_option_values(click.get_current_context())
    if kw.get("spot") and kw.get("flex_start"):
        raise UsageProblem("--spot and --flex-start exclude each other: choose one provisioning model")
    labels = parse_pairs(kw.get("labels"), "--label")
    zones = [z.strip() for z in kw["zones"].split(",") if z.strip()] if kw.get("zones") else []
    if kw.get("zone"):
        if zones:
            raise UsageProblem("--zone and --zones exclude each other")
        zones = [kw["zone"]]
    flags: dict[str, Any] = {
        "name": kw.get("name"),
        "machine_type": kw.get("machine_type"),
        "nodes": kw.get("nodes"),
        "region": kw.get("region"),
        "zones": zones,
        "reservation": kw.get("reservation"),
        "create_reservation": kw.get("create_reservation"),
        "placement": "none" if kw.get("no_placement") else None,
        "gpus": kw.get("gpus"),
        "image": kw.get("image"),
        "prepull": kw.get("prepull"),
        "boot_disk_gb": kw.get("boot_disk_gb"),
        "boot_disk_type": kw.get("boot_disk_type"),
        "service_account": kw.get("service_account"),
        "job_service_account": kw.get("job_service_account"),
        "scopes": list(kw.get("scopes") or ()),
        "labels": labels or None,
        "network": kw.get("network"),
        "subnetwork": kw.get("subnetwork"),
        "external_ips": kw.get("external_ips"),
        "iap_ssh": kw.get("iap_ssh"),
        "cloud_nat": False if kw.get("no_nat") else None,
        "host_tuning": False if kw.get("no_host_tuning") else None,
        "scheduler": kw.get("scheduler"),
    }
    if kw.get("spot"):
        flags["provisioning"] = "spot"
    if kw.get("flex_start"):
        flags["provisioning"] = "flex-start"
        flags["max_run_duration"] = duration("max_run_duration", kw["flex_start"], "--flex-start")
    if kw.get("flex_wait") is not None:
        flags["flex_wait"] = duration("flex_wait", kw["flex_wait"], "--flex-wait")
    if kw.get("max_run_duration") is not None:
        if kw.get("flex_start"):
            raise UsageProblem("--max-run-duration and --flex-start both set the run duration: give it once "
                               f"(--flex-start {kw['flex_start']})")
        flags["max_run_duration"] = duration("max_run_duration", kw["max_run_duration"], "--max-run-duration")
    if kw.get("termination_action") is not None:
        flags["termination_action"] = kw["termination_action"]
    flags.update(autostop_flags(kw))
    flags.update(storage_flags(kw))
    note = _own_location_first(settings, flags, "--zone" if kw.get("zone") else "--zones")
    spec = ClusterSpec.from_sources(kw.get("spec_file"), flags)
    if isinstance(spec.name, str) and spec.name != spec.name.lower():
        check_cluster_name(spec.name)  # a name with capitals: refused with its lowercase form, before the spec's checks
    spec = spec.validate(default_region=settings.optional("region"), default_zone=settings.optional("zone"))
    if note:  # after validation: bad input stays one line
        info(note)
    return spec


def _own_location_first(settings: Settings, flags: dict[str, Any], zone_option: str) -> str | None:
    """The command's own --zone/--zones/--region are what it reads; the global --region/--zone are its
    default when it has none (README, "Conventions"). A zone outside the region is refused naming
    the option the user typed. Returns a note naming a global flag the command does not use."""
    from gcpgpu import catalog

    region = flags["region"]
    for z in flags["zones"]:
        zr = catalog.region_of(z)
        if zr is None:
            raise UsageProblem(f"{zone_option} {z!r} is not a zone the catalog knows (as of "
                               f"{catalog.availability_as_of()}); see 'gcpgpu catalog zones'")
        if region and zr != region:
            raise UsageProblem(f"{zone_option} {z} is in {zr}, not in --region {region}; "
                               f"drop one, or pass --region {zr}")
    g_region, g_zone = settings.region_flag, settings.zone_flag
    if flags["zones"] or region:
        reads = {"region": region or catalog.region_of(flags["zones"][0]), "zones": flags["zones"]}
        unused = [f"--{name} {value}" for name, value in (("region", g_region), ("zone", g_zone))
                  if value and not (value == reads["region"] if name == "region" else value in reads["zones"])]
        if not unused:
            return None
        own = f"{zone_option} {','.join(flags['zones'])}" if flags["zones"] else f"--region {region}"
        return f"note: using the command's {own}, not the global {' and '.join(unused)}"
    if g_region:
        flags["region"] = g_region  # a region flag is an instruction, not a default a zone may override
    return None
