"""`gcpgpu reservation`: reservations, their blocks, and calendar-mode future reservations."""

from __future__ import annotations

import time

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings

RES_COLUMNS = [("name", "NAME"), ("zone", "ZONE"), ("machine_type", "MACHINE TYPE"), ("count", "COUNT"),
               ("in_use", "IN USE"), ("free", "FREE"), ("deployment", "DEPLOYMENT"), ("ends", "ENDS")]
FUTURE_COLUMNS = [("name", "NAME"), ("zone", "ZONE"), ("machine_type", "MACHINE TYPE"), ("count", "COUNT"),
                  ("mode", "MODE"), ("status", "STATUS"), ("start", "START"), ("end", "END")]
BLOCK_COLUMNS = [("name", "BLOCK / SUB-BLOCK"), ("count", "HOSTS"), ("in_use", "IN USE"), ("free", "FREE"),
                 ("health", "HEALTH")]


@click.group()
def reservation() -> None:
    """Reserved capacity: reservations and their blocks, calendar-mode future reservations.

    \b
    A3 Ultra, A4 and A4X capacity is sold through reservations: DENSE ones laid out in
    blocks and sub-blocks, and calendar-mode future reservations (1 to 90 days, up to
    8 weeks ahead) that deliver one when their window opens. 'advise' asks Compute
    Engine where and when; 'create' books it; 'cluster up --reservation NAME
    --wait-for-start' waits for the window and consumes it.
    """


def _count(value: int | None, flag: str = "--count") -> int:
    if value is None or value < 1:
        raise UsageProblem(f"{flag} must be a whole number of VMs, at least 1")
    return value


def _machine(name: str) -> str:
    from gcpgpu import catalog

    return catalog.get_machine_type(name).name


def _name(name: str) -> str:
    from gcpgpu.cluster.names import RFC1035

    if not RFC1035.match(name or ""):
        raise UsageProblem(f"NAME {name!r} must be an RFC 1035 name: lowercase letters, digits and hyphens, "
                           "starting with a letter, at most 63 characters")
    return name


@reservation.command("list")
@click.pass_obj
def list_(settings: Settings) -> None:
    """List reservations (count, in use, free) and future reservations (status and window)."""
    from gcpgpu.cluster import reservations as rv

    res, future = rv.list_all(settings.clients, settings.project)
    if settings.format != "table":
        emit({"reservations": res, "futureReservations": future})
        return
    emit(res, RES_COLUMNS, title="Reservations", empty="No reservations.")
    emit(future, FUTURE_COLUMNS, title="Future reservations", empty="No future reservations.")


@reservation.command()
@click.argument("name")
@click.pass_obj
def describe(settings: Settings, name: str) -> None:
    """Show one reservation with its blocks and sub-blocks, or one future reservation."""
    from gcpgpu.cluster import reservations as rv

    _name(name)
    zone, kind = rv.find_zone(settings.clients, settings.project, name, settings.optional("zone"))
    res, future = rv.list_all(settings.clients, settings.project)
    if kind == "future":
        row = next(r for r in future if r["name"] == name and r["zone"] == zone)
        emit(row) if settings.format != "table" else emit([row], FUTURE_COLUMNS, title=f"Future reservation {name}")
        return
    row = next(r for r in res if r["name"] == name and r["zone"] == zone)
    blocks = rv.blocks(settings.clients, settings.project, zone, name) if row["deployment"] == "DENSE" else []
    if settings.format != "table":
        emit({**row, "blocks": blocks})
        return
    emit([row], RES_COLUMNS, title=f"Reservation {name}")
    rows = []
    for b in blocks:
        rows.append({k: b[k] for k in ("name", "count", "in_use", "free", "health")})
        rows.extend({**s, "name": f"  {s['name']}"} for s in b["sub_blocks"])
    if blocks:
        emit(rows, BLOCK_COLUMNS, title="Blocks")


@reservation.command()
@click.option("--machine-type", required=True, help="GPU machine type, e.g. a3-ultragpu-8g.")
@click.option("--count", type=int, required=True, help="How many VMs.")
@click.option("--duration", required=True, help="How long, e.g. 7d (calendar mode: 1d..90d).")
@click.option("--start-after", default="0s", show_default=True,
              help="Earliest start: an RFC 3339 time or a delay from now (e.g. 2d).")
@click.pass_obj
def advise(settings: Settings, machine_type: str, count: int, duration: str, start_after: str) -> None:
    """Ask Compute Engine (advice.calendarMode) where and when a calendar-mode reservation can be had."""
    from gcpgpu.cluster import reservations as rv

    mt, n = _machine(machine_type), _count(count)
    seconds = rv.parse_window_length(duration)
    now = time.time()
    earliest = max(rv.parse_when(start_after, "--start-after", now), now)
    got = rv.advise(settings.clients, settings.project, settings.region, mt, n, seconds, earliest)
    if settings.format != "table":
        emit(got)
        return
    if got["zone"]:
        info(f"{n} x {mt}: {got['zone']}, {got['start']} to {got['end']}")
        info(f"book it: gcpgpu reservation create NAME --zone {got['zone']} --machine-type {mt} --count {n} "
             f"--start {got['start']} --duration {duration}")
    else:
        info(f"{n} x {mt}: no zone of {settings.region} can be advised for that window")
    for zone, why in sorted(got["others"].items()):
        info(f"  {zone}: {why}")


@reservation.command()
@click.argument("name")
@click.option("--machine-type", required=True, help="GPU machine type, e.g. a3-ultragpu-8g.")
@click.option("--count", type=int, required=True, help="How many VMs.")
@click.option("--start", required=True, help="Window start: an RFC 3339 time or a delay from now (e.g. 2d).")
@click.option("--duration", required=True, help="Window length, 1d..90d (e.g. 7d).")
@click.pass_obj
def create(settings: Settings, name: str, machine_type: str, count: int, start: str, duration: str) -> None:
    """Book a calendar-mode future reservation (DENSE) in --zone; its reservation carries NAME."""
    from gcpgpu.cluster import reservations as rv
    from gcpgpu.times import format_timestamp

    _name(name)
    mt, n = _machine(machine_type), _count(count)
    seconds = rv.parse_window_length(duration)
    now = time.time()
    begin = rv.parse_when(start, "--start", now)
    rv.check_calendar_window(begin, seconds, now)
    zone = settings.zone
    rv.create(settings.clients, settings.project, zone, name, mt, n, begin, seconds)
    info(f"Future reservation {name} ({zone}) submitted: {n} x {mt}, {format_timestamp(begin)} to "
         f"{format_timestamp(begin + seconds)}. Use it: gcpgpu cluster up CLUSTER --machine-type {mt} --nodes {n} "
         f"--zone {zone} --reservation {name} --wait-for-start")


@reservation.command()
@click.argument("name")
@click.pass_obj
def cancel(settings: Settings, name: str) -> None:
    """Cancel a future reservation that has not started."""
    from gcpgpu.cluster import reservations as rv

    _name(name)
    zone, kind = rv.find_zone(settings.clients, settings.project, name, settings.optional("zone"))
    if kind != "future":
        raise UsageProblem(f"{name} is a reservation, not a future reservation; 'cancel' applies to future "
                           "reservations (delete a reservation with 'gcloud compute reservations delete')")
    rv.cancel(settings.clients, settings.project, zone, name)
    info(f"Future reservation {name} ({zone}) cancelled.")
