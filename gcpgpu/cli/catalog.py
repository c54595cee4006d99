"""`gcpgpu catalog`: the GPU machine types gcpgpu knows, from its bundled catalog (no API calls)."""

from __future__ import annotations

import click

from gcpgpu import catalog as machine_catalog
from gcpgpu.output import Column, current_format, emit, info


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
    Column("price_per_hour", "On-demand $/h per node", format=_money),
    Column("spot_price_per_hour", "Spot $/h per node", format=_money),
    Column("verified", "vCPUs/memory verified"),
]


def _price_note() -> None:
    # On stderr, like all notes: the table on stdout stays clean for grep and awk.
    if current_format() == "table":
        info(
            f"Prices: USD per node-hour as quoted {machine_catalog.prices_as_of()}; '-' where unknown; prices change."
        )


@click.group(invoke_without_command=True)
@click.pass_context
def catalog(ctx: click.Context) -> None:
    """GPU machine types: GPUs, NICs, Vertex AI names, prices.

    \b
    The catalog ships with gcpgpu and needs no project or credentials.
    Columns: GPUS per node, GIB/GPU of GPU memory, GPU NICS beyond the host NIC,
    GPUDIRECT flavour (none, tcpx, tcpxo, rdma), VERTEX ACCELERATOR (the Vertex AI
    AcceleratorType, '-' where Vertex does not offer the machine type), and
    on-demand and spot $/H per node.
    """
    if ctx.invoked_subcommand is None:
        emit(list(machine_catalog.machine_types().values()), _LIST_COLUMNS)
        _price_note()


@catalog.command("show")
@click.argument("machine_type", metavar="MACHINE_TYPE")
def show(machine_type: str) -> None:
    """Show every catalog field of one machine type.

    \b
    Example:
      gcpgpu catalog show a3-highgpu-8g
      gcpgpu --format json catalog show a3-highgpu-8g
    """
    emit(machine_catalog.get_machine_type(machine_type, option="MACHINE_TYPE"), _SHOW_COLUMNS)
    _price_note()


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
