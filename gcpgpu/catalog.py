"""The GPU machine catalog: typed, read-only views over gcpgpu/data/machines.yaml.

The YAML is the single source of truth (the emulator serves the same file); this module only
parses it, applies per-machine overrides over the family's values, and looks names up.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Any

import yaml

from gcpgpu.errors import UsageProblem

# The C loader parses the catalog several times faster; fall back where libyaml is absent.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_GPU_KEYS = {
    "model", "memory_gib", "vertex_accelerator", "quota_metric", "spot_quota_metric",
    "peak_bf16_tflops", "price_per_hour", "spot_price_per_hour", "nvlink_gbytes_per_s",
}  # fmt: skip
# Where a GPU's prices come from; absent: the catalog-wide `prices` entry (as_of, source).
_PRICE_KEYS = {"price_source", "price_as_of", "price_verified"}
_FAMILY_KEYS = {
    "gpu_nics", "gpudirect", "nic_type", "gpu_nic_mtu", "gvnic_networks", "gvnic_mtu",
    "compact_max_vms", "compact_max_vms_verified", "max_net_gbps",
}  # fmt: skip
# A machine type may override any family key (a3-highgpu-1g..4g have no GPU NICs).
_MACHINE_KEYS = ({"family", "gpu", "gpu_count", "vcpus", "memory_mb", "verified", "vertex", "local_ssds",
                  "price_per_hour", "spot_price_per_hour"} | _PRICE_KEYS | _FAMILY_KEYS)


@dataclass(frozen=True)
class GpuType:
    """One GPU model, named by its Compute Engine accelerator type (e.g. nvidia-h100-80gb)."""

    name: str
    model: str
    memory_gib: int
    vertex_accelerator: str | None
    quota_metric: str
    spot_quota_metric: str
    peak_bf16_tflops: float | None
    price_per_hour: float | None
    spot_price_per_hour: float | None
    nvlink_gbytes_per_s: float | None = None  # NVLink bandwidth of one GPU, both directions; 0: none
    price_source: str = ""
    price_as_of: str = ""
    price_verified: bool = False


@dataclass(frozen=True)
class MachineType:
    """One GPU machine type with its GPUs, network and prices per node."""

    name: str
    family: str
    gpu: GpuType
    gpu_count: int
    vcpus: int
    memory_mb: int
    gpu_nics: int  # NICs dedicated to GPU traffic, beyond the host NIC
    gpudirect: str  # none | tcpx | tcpxo | rdma
    nic_type: str  # GVNIC | MRDMA
    gpu_nic_mtu: int | None
    gvnic_networks: int  # extra gVNIC VPCs (A3 Ultra, A4)
    gvnic_mtu: int | None
    compact_max_vms: int
    compact_max_vms_verified: bool
    max_net_gbps: int
    vertex_accelerator: str | None  # Vertex AI AcceleratorType enum name; None where Vertex lacks it
    price_per_hour: float | None  # USD per node, on-demand; None where the catalog has no price
    spot_price_per_hour: float | None
    verified: bool  # vcpus/memory confirmed against a real API
    local_ssds: int = 0  # 375 GiB local NVMe SSDs the machine type comes with (none to attach: bundled)
    price_source: str = ""  # where a whole-VM fallback price comes from ("": its GPU's, times gpu_count)
    price_as_of: str = ""

    @property
    def accelerator_type(self) -> str:
        """The Compute Engine accelerator type of its GPUs (e.g. nvidia-h100-80gb)."""
        return self.gpu.name


@functools.cache
def _raw() -> dict[str, Any]:
    # importlib.resources, not a path next to __file__, so an installed wheel (or zip) works too.
    text = (files("gcpgpu") / "data" / "machines.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader)


def _check_keys(kind: str, name: str, entry: dict[str, Any], allowed: set[str]) -> None:
    # A misspelt key would silently fall back to the family value: refuse it instead.
    unknown = set(entry) - allowed
    if unknown:
        raise ValueError(f"machines.yaml: {kind} {name!r} has unknown keys {sorted(unknown)}")


def _price(per_gpu: float | None, count: int) -> float | None:
    return None if per_gpu is None else round(per_gpu * count, 4)


@functools.cache
def gpu_types() -> MappingProxyType[str, GpuType]:
    """Every GPU in the catalog, by Compute accelerator type name."""
    gpus = {}
    prices = _raw()["prices"]
    for name, entry in _raw()["gpus"].items():
        _check_keys("gpu", name, entry, _GPU_KEYS | _PRICE_KEYS)
        gpus[name] = GpuType(name=name, **{key: entry.get(key) for key in _GPU_KEYS},
                             price_source=str(entry.get("price_source") or prices.get("source") or ""),
                             price_as_of=str(entry.get("price_as_of") or prices["as_of"]),
                             price_verified=bool(entry.get("price_verified", prices.get("verified", False))))
    return MappingProxyType(gpus)


@functools.cache
def machine_types() -> MappingProxyType[str, MachineType]:
    """Every GPU machine type in the catalog, by name, in the data file's order."""
    raw = _raw()
    families = raw["families"]
    for name, entry in families.items():
        _check_keys("family", name, entry, _FAMILY_KEYS)
    machines = {}
    for name, entry in raw["machine_types"].items():
        _check_keys("machine type", name, entry, _MACHINE_KEYS)
        merged = {**families[entry["family"]], **entry}
        gpu = gpu_types()[entry["gpu"]]
        count = int(entry["gpu_count"])
        gpu_nics = int(merged["gpu_nics"])
        machines[name] = MachineType(
            name=name,
            family=entry["family"],
            gpu=gpu,
            gpu_count=count,
            vcpus=int(entry["vcpus"]),
            memory_mb=int(entry["memory_mb"]),
            gpu_nics=gpu_nics,
            gpudirect=merged["gpudirect"],
            nic_type=merged["nic_type"],
            # The family's GPU-NIC MTU means nothing on a type without GPU NICs (a3-highgpu-1g).
            gpu_nic_mtu=merged.get("gpu_nic_mtu") if gpu_nics else None,
            gvnic_networks=int(merged.get("gvnic_networks", 0)),
            gvnic_mtu=merged.get("gvnic_mtu"),
            compact_max_vms=int(merged["compact_max_vms"]),
            compact_max_vms_verified=bool(merged.get("compact_max_vms_verified", False)),
            max_net_gbps=int(merged["max_net_gbps"]),
            # `vertex: false` marks machine types Vertex AI does not offer (a3-edgegpu-8g).
            vertex_accelerator=gpu.vertex_accelerator if merged.get("vertex", True) else None,
            # The offline fallback (gcpgpu/pricing reads the Billing Catalog): the machine's own whole-VM
            # figures where the table has them, else its GPUs' (a3-highgpu-8g is not 8 bare GPUs).
            price_per_hour=entry.get("price_per_hour", _price(gpu.price_per_hour, count)),
            spot_price_per_hour=entry.get("spot_price_per_hour", _price(gpu.spot_price_per_hour, count)),
            verified=bool(entry.get("verified", False)),
            local_ssds=int(entry.get("local_ssds", 0)),
            price_source=str(entry.get("price_source") or ""),
            price_as_of=str(entry.get("price_as_of") or ""),
        )
    return MappingProxyType(machines)


def prices_as_of() -> str:
    """The date the catalog's prices were quoted (e.g. '2025-01'); prices change."""
    return str(_raw()["prices"]["as_of"])


def price_as_of(machine: MachineType) -> str:
    """The date `machine`'s prices were quoted: its GPU's own date where the data gives one."""
    return machine.price_as_of or machine.gpu.price_as_of or prices_as_of()


def price_source(machine: MachineType) -> str:
    """Where `machine`'s fallback price comes from: its own source, else its GPU's."""
    return machine.price_source or machine.gpu.price_source


def billing() -> dict[str, Any]:
    """How Google bills each family in the Cloud Billing Catalog (the catalog's `billing` table)."""
    return _raw()["billing"]


def price_note(machine: MachineType) -> str:
    """Where `machine`'s price comes from, in a few words: 'catalog prices of 2025-03-06, unverified'."""
    verified = machine.gpu.price_verified and not machine.price_source
    return f"catalog prices of {price_as_of(machine)}" + ("" if verified else ", unverified")


def get_machine_type(name: str, *, option: str = "--machine-type") -> MachineType:
    """The machine type called name; a UsageProblem naming `option` and close names if unknown.

    `option` is how the user gave the name: a flag, an argument, or a spec file's field.
    """
    # Accept what the API hands back (zones/z/machineTypes/a3-highgpu-8g). Capitals are refused with
    # the lowercase name, as cluster names are: one rule for every name the user types.
    key = name.strip().rsplit("/", 1)[-1]
    known = machine_types()
    if key in known:
        return known[key]
    if key.lower() in known:
        raise UsageProblem(f"{option} {name!r} is not a machine type name (they are lowercase); "
                           f"did you mean {key.lower()!r}?")
    close = difflib.get_close_matches(key.lower(), list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageProblem(f"{option} {name!r} is not a known GPU machine type{hint} (see 'gcpgpu catalog')")


@functools.cache
def availability() -> MappingProxyType[str, MappingProxyType[str, tuple[str, ...]]]:
    """region -> zone -> GPU machine types offered there (the catalog's `availability` table)."""
    import fnmatch

    table = {}
    for region, entry in _raw()["availability"]["regions"].items():
        table[region] = MappingProxyType({
            zone: tuple(m for m in machine_types() if any(fnmatch.fnmatchcase(m, p) for p in patterns))
            for zone, patterns in entry["zones"].items()
        })
    return MappingProxyType(table)


def availability_as_of() -> str:
    return str(_raw()["availability"]["as_of"])


def region_of(zone: str) -> str | None:
    """The catalog region a zone belongs to, or None for a zone the catalog does not know."""
    for region, zones in availability().items():
        if zone in zones:
            return region
    return None


def zones_offering(machine_type: str, region: str) -> list[str]:
    """The zones of `region` where the catalog says `machine_type` is offered, in order."""
    return [z for z, offered in availability().get(region, {}).items() if machine_type in offered]


@dataclass(frozen=True)
class NodeSetup:
    """What a node of one machine family boots and installs (the catalog's `nodes` entry)."""

    family: str
    image: str
    driver: str  # dlvm-metadata | baked
    boot_disk_type: str
    boot_disk_types: tuple[str, ...]
    requires: str  # what gcpgpu does not install and the family needs ("" when nothing)
    source: str
    verified: bool


@dataclass(frozen=True)
class GpuDirectHost:
    """The host side of a GPUDirect flavour: the receive-datapath manager and the plugin installer."""

    flavor: str
    rxdm_image: str
    rxdm_entrypoint: str | None
    rxdm_args: tuple[str, ...]
    rxdm_volumes: tuple[str, ...]
    rxdm_env: MappingProxyType[str, str]
    rxdm_docker_flags: tuple[str, ...]
    ready: str  # uds | log
    ready_log: str
    installer_image: str
    installer_args: tuple[str, ...]
    source: str
    verified: bool

    @property
    def uds_path(self) -> str | None:
        """The directory the RxDM serves its sockets in (TCPX's --uds_path), or None."""
        args = self.rxdm_args
        return args[args.index("--uds_path") + 1] if "--uds_path" in args else None


@dataclass(frozen=True)
class Outbound:
    """What a node with no external IP needs to reach Google's APIs, and the GPU metrics agent."""

    private_google_access_source: str
    cloud_nat_source: str
    ops_agent_repo_script: str
    ops_agent_source: str
    ops_agent_verified: bool


@functools.cache
def node_setups() -> MappingProxyType[str, NodeSetup]:
    """Per machine family: image, driver, boot disk types, with their source."""
    out = {}
    for family, e in _raw()["nodes"].items():
        out[family] = NodeSetup(family=family, image=e["image"], driver=e["driver"],
                                boot_disk_type=e["boot_disk_type"], boot_disk_types=tuple(e["boot_disk_types"]),
                                requires=str(e.get("requires") or ""), source=e["source"],
                                verified=bool(e.get("verified", False)))
        if out[family].boot_disk_type not in out[family].boot_disk_types:
            raise ValueError(f"machines.yaml: nodes.{family}.boot_disk_type is not in its boot_disk_types")
    return MappingProxyType(out)


def node_setup(machine: MachineType) -> NodeSetup:
    return node_setups()[machine.family]


def _pinned(value: str) -> str:
    """Expand a whole-value "${KEY}" from containers/versions.env (KeyError names a missing pin)."""
    if value.startswith("${") and value.endswith("}"):
        from gcpgpu import resources

        return resources.image_versions()[value[2:-1]]
    return value


def gpudirect_host(flavor: str) -> GpuDirectHost | None:
    """The receive-datapath manager a flavour needs on the host (tcpx, tcpxo), or None."""
    e = _raw().get("gpudirect_host", {}).get(flavor)
    if not e:
        return None
    # Image pins shared with the training image live in containers/versions.env: "${KEY}" names one.
    e = {k: _pinned(v) if isinstance(v, str) else v for k, v in e.items()}
    return GpuDirectHost(flavor=flavor, rxdm_image=e["rxdm_image"], rxdm_entrypoint=e.get("rxdm_entrypoint"),
                         rxdm_args=tuple(str(a) for a in e["rxdm_args"]), rxdm_volumes=tuple(e["rxdm_volumes"]),
                         rxdm_env=MappingProxyType({k: str(v) for k, v in e["rxdm_env"].items()}),
                         rxdm_docker_flags=tuple(str(a) for a in e["rxdm_docker_flags"]),
                         ready=e["ready"], ready_log=str(e.get("ready_log") or ""),
                         installer_image=e["installer_image"], installer_args=tuple(e["installer_args"]),
                         source=e["source"], verified=bool(e.get("verified", False)))


@functools.cache
def outbound() -> Outbound:
    raw = _raw()
    return Outbound(private_google_access_source=raw["egress"]["private_google_access"]["source"],
                    cloud_nat_source=raw["egress"]["cloud_nat"]["source"],
                    ops_agent_repo_script=raw["ops_agent"]["repo_script"], ops_agent_source=raw["ops_agent"]["source"],
                    ops_agent_verified=bool(raw["ops_agent"].get("verified", False)))
