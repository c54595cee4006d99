"""`gcpgpu catalog`: the GPU machine types gcpgpu knows (bundled catalog), priced per region from the Cloud
Billing Catalog (gcpgpu/pricing: cached, refreshed weekly when credentials allow, else the bundled table)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from gcpgpu import catalog as machine_catalog
from gcpgpu.errors import UsageProblem
from gcpgpu.output import Column, current_format, emit, info
from gcpgpu.settings import Settings


def _money(value: float) -> str:
    return f"{value:,.2f}"


_LIST_COLUMNS = [
    Column("name", "MACHINE TYPE"),
    Column("gpu.model", "GPU"),
    Column("gpu_count", "GPUS", justify="right"),
    Column("gpu.memory_gib", "GIB/GPU", justify="right"),
    Column("gpu_nics", "GPU NICS", justify="right"),
    Column("gpudirect", "GPUDIRECT"),
    Column("vertex_accelerator", "VERTEX ACCELERATOR"),
    Column("price_per_hour", "$/H", justify="right", format=_money),
    Column("spot_price_per_hour", "SPOT $/H", justify="right", format=_money),
    Column("flex_start_price_per_hour", "FLEX $/H", justify="right", format=_money),
]

_SHOW_COLUMNS = [
    Column("name", "Machine type"),
    Column("family", "Family"),
    Column("gpu.name", "Accelerator type"),
    Column("gpu.model", "GPU"),
    Column("gpu_count", "GPUs"),
    Column("gpu.memory_gib", "GPU memory (GiB each)"),
    Column("vcpus", "vCPUs"),
    Column("memory_mb", "Memory (MB)"),
    Column("gpu_nics", "GPU NICs"),
    Column("gpudirect", "GPUDirect"),
    Column("nic_type", "NIC type"),
    Column("gpu_nic_mtu", "GPU NIC MTU"),
    Column("gvnic_networks", "Extra gVNIC networks"),
    Column("max_net_gbps", "Max network (Gbps)"),
    Column("compact_max_vms", "Compact placement max VMs"),
    Column("vertex_accelerator", "Vertex accelerator"),
    Column("gpu.quota_metric", "Quota metric"),
    Column("gpu.spot_quota_metric", "Spot quota metric"),
    Column("region", "Priced in"),
    Column("price_per_hour", "On-demand $/h per node", format=_money),
    Column("spot_price_per_hour", "Spot $/h per node", format=_money),
    Column("flex_start_price_per_hour", "Flex-start $/h per node", format=_money),
    Column("reserved_price_per_hour", "Reserved $/h per node", format=_money),
    Column("price_source", "Price source"),
    Column("prices_as_of", "Prices as of"),
    Column("verified", "vCPUs/memory verified"),
]


def price_region(settings: Settings, region: str | None) -> str:
    """The region to price in: --region (the command's or the global one), else us-central1; one the catalog
    does not know is refused before any API call."""
    from gcpgpu.pricing.book import DEFAULT_REGION

    chosen = region or settings.region_flag or DEFAULT_REGION
    known = machine_catalog.availability()
    if chosen not in known:
        raise UsageProblem(f"--region {chosen!r} is not a region the catalog knows; known: {', '.join(known)}")
    return chosen


def priced(machine: machine_catalog.MachineType, book: Any, region: str) -> dict[str, Any]:
    """A machine type's catalog fields with its node prices in `region` and where they come from."""
    p = book.node(machine, region)
    row = dataclasses.asdict(machine)
    row.update(region=region, price_per_hour=p.on_demand, spot_price_per_hour=p.spot,
               flex_start_price_per_hour=p.flex_start, reserved_price_per_hour=p.reserved,
               price_source=p.source, prices_as_of=p.as_of)
    return row


def _book(settings: Settings) -> Any:
    from gcpgpu import pricing

    return pricing.current()  # against the Google the global options name


def _price_note(book: Any, region: str, rows: list[dict[str, Any]]) -> None:
    # On stderr, like all notes: the table on stdout stays clean for grep and awk.
    if current_format() == "table":
        info(f"Prices: USD per node-hour in {region}; {book.note}; '-' where unknown; prices change.")
        apart = [r["name"] for r in rows if r["price_source"] != book.source]
        if apart:  # a family the catalog read holds no SKUs for (G2 in the emulator's snapshot)
            info(f"{', '.join(apart)}: no {book.source} SKUs in {region}; the {rows_source(rows, apart[0])}'s "
                 "figures, not per region.")


def rows_source(rows: list[dict[str, Any]], name: str) -> str:
    return next(r["price_source"] for r in rows if r["name"] == name)


@click.group(invoke_without_command=True)
@click.option("--region", "region", metavar="REGION", help="Price in this region (default: us-central1).")
@click.pass_context
def catalog(ctx: click.Context, region: str | None) -> None:
    """GPU machine types: GPUs, NICs, Vertex AI names, prices.

    \b
    The machine types ship with gcpgpu; prices come from Google's Cloud Billing
    Catalog (cached for a week; read again when credentials allow), else from the
    bundled table, and the note under the table says which and how old.
    Columns: GPUS per node, GIB/GPU of GPU memory, GPU NICS beyond the host NIC,
    GPUDIRECT flavour (none, tcpx, tcpxo, rdma), VERTEX ACCELERATOR (the Vertex AI
    AcceleratorType, '-' where Vertex does not offer the machine type), and
    on-demand, Spot and flex-start (DWS) $/H per node in --region.
    """
    ctx.meta["catalog_region"] = region
    if ctx.invoked_subcommand is None:
        settings = ctx.find_root().obj
        where = price_region(settings, region)
        book = _book(settings)
        rows = [priced(m, book, where) for m in machine_catalog.machine_types().values()]
        emit(rows, _LIST_COLUMNS)
        _price_note(book, where, rows)


@catalog.command("show")
@click.argument("machine_type", metavar="MACHINE_TYPE")
@click.option("--region", "region", metavar="REGION", help="Price in this region (default: us-central1).")
@click.pass_context
def show(ctx: click.Context, machine_type: str, region: str | None) -> None:
    """Show every catalog field of one machine type, with its prices in a region.

    \b
    Example:
      gcpgpu catalog show a3-highgpu-8g
      gcpgpu --format json catalog show a3-highgpu-8g --region us-east5
    """
    settings = ctx.find_root().obj
    machine = machine_catalog.get_machine_type(machine_type, option="MACHINE_TYPE")
    where = price_region(settings, region or ctx.meta.get("catalog_region"))
    book = _book(settings)
    row = priced(machine, book, where)
    emit(row, _SHOW_COLUMNS)
    _price_note(book, where, [row])


@catalog.command("zones")
@click.option("--machine-type", help="Only the zones that offer this machine type.")
@click.option("--region", "only_region", metavar="REGION", help="Only this region's zones.")
def zones(machine_type: str | None, only_region: str | None) -> None:
    """Regions and zones the catalog knows, and the GPUs each zone offers.

    \b
    The zones `cluster up --zone/--zones/--region` accept; the data is the catalog's
    (gcpgpu/data/machines.yaml `availability`), not a live query.
    \b
    Example:
      gcpgpu catalog zones --machine-type a3-megagpu-8g
    """
    from gcpgpu.errors import UsageProblem

    wanted = machine_catalog.get_machine_type(machine_type).name if machine_type else None
    table = machine_catalog.availability()
    if only_region is not None and only_region not in table:
        raise UsageProblem(f"--region {only_region!r} is not a region the catalog knows; known: {', '.join(table)}")
    known = machine_catalog.machine_types()
    rows = [{"region": region, "zone": zone,
             "gpus": sorted({known[m].gpu.model for m in offered}),
             "machine_types": list(offered)}
            for region, zone_table in table.items() if only_region in (None, region)
            for zone, offered in zone_table.items() if wanted is None or wanted in offered]
    emit(rows, [Column("region", "REGION"), Column("zone", "ZONE"),
                Column("gpus", "GPUS OFFERED", format=", ".join)],
         empty=f"No zone in the catalog offers {wanted}." if wanted else "No zones.")
    if current_format() == "table":
        info(f"Availability as the catalog records it ({machine_catalog.availability_as_of()}); "
             "not a live query, and Google's offer changes.")
