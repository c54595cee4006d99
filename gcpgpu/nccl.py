"""NCCL settings per GPUDirect flavour, as data; interface names per platform; the tuner-plugin config.

A machine type's GPUDirect flavour (catalog: none, tcpx, tcpxo, rdma) picks a Profile: the
variables Google publishes for that network (shared/reference/gcp-facts.md section 8), the plugin
the image must carry, and the host paths the plugin needs. Values that name network interfaces
are templates: the names differ between a VM and a Kubernetes pod, so `interface_names` derives
them per platform. Anything a user sets wins over the profile.

Nothing here imports a Google library, grpc or torch: the training container's entrypoint runs it
(through gcpgpu.launch) before torch starts, and `gcpgpu nccl --help` must stay fast.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gcpgpu import resources
from gcpgpu.catalog import MachineType
from gcpgpu.errors import UsageProblem

FLAVORS = ("none", "tcpx", "tcpxo", "rdma")
PLATFORMS = ("vm", "container", "vertex")

# The knobs worth reaching for first; each has its own `gcpgpu nccl env` option.
GENERAL_KNOBS = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_BUFFSIZE",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
)

# Variables whose profile value is a directory to put in front of what the process already has.
PREPEND = frozenset({"LD_LIBRARY_PATH"})

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Profile:
    """The NCCL environment for one GPUDirect flavour, and what the host must provide for it.

    Values in `env` may name {socket_ifname}, {host_nic}, {gpu_nics}, {tx_bindings} and
    {rx_bindings}, filled in per machine and platform by `render_env`.
    """

    flavor: str
    summary: str
    source: str  # where the values come from
    env: Mapping[str, str]
    platform_env: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)  # over env, per platform
    family_env: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)  # over env, per machine family
    plugin_image: str | None = None  # Google's image the Dockerfile copies the plugin from
    lib_dir: str | None = None  # goes in front of LD_LIBRARY_PATH
    required_paths: tuple[str, ...] = ()  # must exist in the container, or NCCL cannot use the network
    advised_paths: tuple[str, ...] = ()  # should exist; a warning when missing
    host_needs: str = ""  # what must run on the host, for error messages


# CPU cores for the TCPX plugin's TX and RX threads, per GPU NIC in order (a3-highgpu-8g, 208
# vCPUs: each NIC's threads on the NUMA node its GPUs hang off). Source: Google's GKE GPUDirect-TCPX
# workload settings (container-engine-accelerators), the same cores Cluster Toolkit's VM recipe uses.
_TCPX_TX_CORES = ("8-21,112-125", "8-21,112-125", "60-73,164-177", "60-73,164-177")
_TCPX_RX_CORES = ("22-35,126-139", "22-35,126-139", "74-87,178-191", "74-87,178-191")

PROFILES: Mapping[str, Profile] = _frozen(
    {
        "none": Profile(
            flavor="none",
            summary="NCCL's own TCP sockets (A2, G2, A3 High below 8 GPUs): no GPUDirect plugin",
            source="seed documents' socket tuning (Google's A2 values: unverified)",
            env=_frozen(
                {
                    "NCCL_SOCKET_IFNAME": "{socket_ifname}",
                    "NCCL_NSOCKS_PERTHREAD": "4",
                    "NCCL_SOCKET_NTHREADS": "4",
                    "NCCL_IB_DISABLE": "1",
                }
            ),
            # A2's GPUs share an NVSwitch; G2's L4s have no NVLink, so P2P_LEVEL=NVL would only
            # turn their PCIe peer-to-peer off.
            family_env=_frozen({"a2": _frozen({"NCCL_P2P_LEVEL": "NVL"})}),
        ),
        "tcpx": Profile(
            flavor="tcpx",
            summary="GPUDirect-TCPX (A3 High, A3 Edge): 4 GPU NICs driven by Google's TCPX plugin",
            source="Cluster Toolkit examples/machine-learning/a3-highgpu-8g/nccl-tests/run-nccl-tests.sh; "
            "GKE GPUDirect-TCPX docs (container names, ALGO Ring,Tree)",
            env=_frozen(
                {
                    "NCCL_NET": "GPUDirectTCPX_v7",
                    "NCCL_SOCKET_IFNAME": "{socket_ifname}",
                    "NCCL_GPUDIRECTTCPX_CTRL_DEV": "{host_nic}",
                    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "{gpu_nics}",
                    "NCCL_CROSS_NIC": "0",
                    "NCCL_ALGO": "Ring",
                    "NCCL_PROTO": "Simple",
                    "NCCL_NSOCKS_PERTHREAD": "4",
                    "NCCL_SOCKET_NTHREADS": "1",
                    "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
                    "NCCL_P2P_NET_CHUNKSIZE": "524288",
                    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
                    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
                    "NCCL_BUFFSIZE": "4194304",
                    "NCCL_NET_GDR_LEVEL": "PIX",
                    "NCCL_P2P_PXN_LEVEL": "0",
                    "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx",
                    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
                    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "{tx_bindings}",
                    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "{rx_bindings}",
                }
            ),
            platform_env=_frozen(
                {
                    "container": _frozen({"NCCL_ALGO": "Ring,Tree"}),
                    "vertex": _frozen({"NCCL_ALGO": "Ring,Tree"}),
                }
            ),
            plugin_image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9",
            lib_dir="/usr/local/tcpx/lib64",
            required_paths=("/usr/local/tcpx/lib64/libnccl-net.so", "/run/tcpx"),
            host_needs="the receive-datapath-manager daemon (tcpgpudmarxd) on the host, its /run/tcpx "
            "mounted into the container",
        ),
        "tcpxo": Profile(
            flavor="tcpxo",
            summary="GPUDirect-TCPXO / FasTrak (A3 Mega): 8 GPU NICs driven by Google's FasTrak plugin",
            source="container-engine-accelerators gpudirect-tcpxo/README.md (the plugin's nccl-env-profile.sh); "
            "NCCL_NET=FasTrak as SkyPilot sets it, so a missing plugin fails instead of falling back to sockets",
            env=_frozen(
                {
                    "NCCL_NET": "FasTrak",
                    "NCCL_FASTRAK_CTRL_DEV": "{host_nic}",
                    "NCCL_FASTRAK_IFNAME": "{gpu_nics}",
                    "NCCL_SOCKET_IFNAME": "{socket_ifname}",
                    "NCCL_CROSS_NIC": "0",
                    "NCCL_PROTO": "Simple,LL128",
                    "NCCL_MIN_NCHANNELS": "4",
                    "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
                    "NCCL_TUNER_CONFIG_PATH": "/var/lib/tcpxo/lib64/a3plus_tuner_config.textproto",
                    "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": "/var/lib/tcpxo/lib64/a3plus_guest_config.textproto",
                    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
                    "NCCL_P2P_NET_CHUNKSIZE": "524288",
                    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
                    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
                    "NCCL_FASTRAK_NUM_FLOWS": "2",
                    "NCCL_FASTRAK_USE_SNAP": "1",
                    "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
                    "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
                    "NCCL_BUFFSIZE": "8388608",
                    "NCCL_NET_GDR_LEVEL": "PIX",
                    "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
                    "NCCL_FASTRAK_USE_LLCM": "1",
                    "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
                    "NCCL_NVLS_ENABLE": "1",
                    "NCCL_DEBUG": "WARN",
                }
            ),
            plugin_image=resources.image_versions()["TCPXO_PLUGIN_IMAGE"],  # containers/versions.env
            lib_dir="/var/lib/tcpxo/lib64",
            required_paths=("/var/lib/tcpxo/lib64/libnccl-net.so", "/dev/aperture_devices"),
            advised_paths=("/var/lib/tcpxo/lib64/a3plus_tuner_config.textproto",),
            host_needs="the TCPXO receive-datapath-manager daemon on the host and /dev/aperture_devices "
            "mounted into the container",
        ),
        "rdma": Profile(
            flavor="rdma",
            summary="RDMA over the gIB plugin (A3 Ultra, A4): 8 CX-7 RDMA NICs, found by the plugin itself",
            source="Cluster Toolkit a3-ultragpu-8g and a4-highgpu-8g blueprints (the values gIB's "
            "set_nccl_env.sh sets); VM interface names from PerfKitBenchmarker's a4 Dockerfile",
            env=_frozen(
                {
                    "NCCL_NET": "gIB",
                    "NCCL_SOCKET_IFNAME": "{socket_ifname}",
                    "NCCL_CROSS_NIC": "0",
                    "NCCL_NET_GDR_LEVEL": "PIX",
                    "NCCL_P2P_NET_CHUNKSIZE": "131072",
                    "NCCL_NVLS_CHUNKSIZE": "524288",
                    "NCCL_IB_ADAPTIVE_ROUTING": "1",
                    "NCCL_IB_QPS_PER_CONNECTION": "4",
                    "NCCL_IB_TC": "52",
                    "NCCL_IB_FIFO_TC": "84",
                }
            ),
            family_env=_frozen(
                {
                    # The tuner file is per machine. a3-ultra: CT a3-ultragpu-8g/nemo-framework/Dockerfile
                    # (tuner_config_a3u.txtpb, from the gIB image's /usr/local/gib). a4: unverified; CT's
                    # a4high-vm.yaml, with gIB from the nccl-gib apt package, names configs/tuner_config.txtpb.
                    "a3-ultra": _frozen(
                        {"NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a3u.txtpb"}
                    ),
                    "a4": _frozen(
                        {
                            "NCCL_IB_GID_INDEX": "3",
                            "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a4.txtpb",
                        }
                    ),
                }
            ),
            plugin_image="us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0",
            lib_dir="/usr/local/gib/lib64",
            required_paths=("/usr/local/gib/lib64", "/usr/local/gib/scripts/set_nccl_env.sh", "/dev/infiniband"),
            host_needs="the RDMA NICs' /dev/infiniband devices passed into the container",
        ),
    }
)


# --- interface names -------------------------------------------------------------------------------

# PCI (bus, slot) of each NIC on a GCE VM of the family, as Google's published VM recipes name
# them: the guest names a NIC after its PCI address (systemd's predictable naming, enp<bus>s<slot>),
# and GCE places a family's NICs at the same addresses on every VM. "host" NICs carry NCCL's
# bootstrap traffic; "gpu" NICs are the gVNICs a GPUDirect plugin is told about.
# Sources: A3 High from Cluster Toolkit's a3-highgpu-8g nccl-tests script; A3 Mega from its
# a3-megagpu-8g examples and Google's TCPXO docs; A3 Ultra / A4 gVNICs from Cluster Toolkit's
# a3-ultragpu-8g Slurm examples and PerfKitBenchmarker's a4 Dockerfile (their RDMA NICs are not
# netdevs NCCL is told about: gIB finds them through ibverbs). A3 Edge: assumed as A3 High, unverified.
_VM_NIC_PCI: Mapping[str, Mapping[str, tuple[tuple[int, int], ...]]] = _frozen(
    {
        "a3-high": {"host": ((0, 12),), "gpu": ((6, 0), (12, 0), (134, 0), (140, 0))},
        "a3-edge": {"host": ((0, 12),), "gpu": ((6, 0), (12, 0), (134, 0), (140, 0))},
        "a3-mega": {
            "host": ((0, 12),),
            "gpu": ((6, 0), (7, 0), (13, 0), (14, 0), (134, 0), (135, 0), (141, 0), (142, 0)),
        },
        "a3-ultra": {"host": ((0, 19), (192, 20)), "gpu": ()},
        "a4": {"host": ((0, 19), (192, 20)), "gpu": ()},
    }
)

# NCCL's socket transport takes a prefix list; "^" excludes. With one real NIC this picks it,
# whatever the image calls it (ens4, enp0s4, ...), and skips loopback and Docker's bridges.
ANY_REAL_NIC = "^lo,docker"


@dataclass(frozen=True)
class Interfaces:
    """The network interfaces NCCL is told about on one machine and platform."""

    host: tuple[str, ...]  # NCCL's bootstrap/socket NICs; empty: let NCCL take the one real NIC
    gpu: tuple[str, ...]  # the GPU NICs a GPUDirect plugin drives (gVNIC flavours only)

    @property
    def socket_ifname(self) -> str:
        return ",".join(self.host) if self.host else ANY_REAL_NIC

    @property
    def host_nic(self) -> str:
        return self.host[0] if self.host else ANY_REAL_NIC


def interface_names(machine: MachineType, platform: str) -> Interfaces:
    """The NIC names NCCL should use for `machine` on `platform` (vm, container or vertex).

    Where the names come from:
      * container, vertex: a pod's NICs are named in attachment order by Kubernetes
        multi-networking (GKE; Vertex AI runs training containers the same way): eth0 is the
        default network, then eth1.. one per extra network. A3 High: eth0 + eth1-eth4;
        A3 Mega: eth0 + eth1-eth8; A3 Ultra/A4: two gVNICs eth0, eth1. A machine with one NIC
        gets eth0, which is also what a Docker bridge network shows.
      * vm (and a container started with --network=host on a VM): the guest names each NIC
        after its PCI address, enp<bus>s<slot>, and a family's addresses are fixed
        (see _VM_NIC_PCI). A machine with one NIC is not named at all: "^lo,docker" lets NCCL
        take the one real interface, whatever the image calls it.
    """
    if platform not in PLATFORMS:
        raise UsageProblem(f"--platform {platform!r} is not one of {', '.join(PLATFORMS)}")
    host_count = max(machine.gvnic_networks, 1)
    gpu_gvnics = machine.gpu_nics if machine.nic_type == "GVNIC" else 0
    if platform in ("container", "vertex"):
        host = tuple(f"eth{i}" for i in range(host_count))
        gpu = tuple(f"eth{host_count + i}" for i in range(gpu_gvnics))
        return Interfaces(host, gpu)
    if machine.gpu_nics == 0 and machine.gvnic_networks == 0:
        return Interfaces((), ())
    layout = _VM_NIC_PCI.get(machine.family)
    if layout is None:
        raise UsageProblem(
            f"no known VM NIC layout for the {machine.family} family ({machine.name}); pass "
            "--platform container, or name the NICs with --set NCCL_SOCKET_IFNAME=..."
        )
    host = tuple(f"enp{bus}s{slot}" for bus, slot in layout["host"])
    gpu = tuple(f"enp{bus}s{slot}" for bus, slot in layout["gpu"])
    return Interfaces(host, gpu)


# --- knobs: values checked before they reach NCCL -----------------------------------------------------

_ALGOS = ("Tree", "Ring", "CollNet", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
_PROTOS = ("LL", "LL128", "Simple")
_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
_SUBSYS = (
    "INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY",
    "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL",
)  # fmt: skip
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_list(name: str, value: str, allowed: tuple[str, ...], option: str) -> None:
    # NCCL reads these as comma lists, optionally negated with a leading "^", case-insensitively.
    items = value[1:] if value.startswith("^") else value
    known = {a.lower() for a in allowed}
    bad = [item for item in items.split(",") if item.strip().lower() not in known]
    if not items or bad:
        raise UsageProblem(
            f"{option} {value!r} is not a comma list of {', '.join(allowed)} (a leading ^ excludes)"
        )


def _check_int(value: str, option: str, low: int, high: int | None = None) -> int:
    try:
        number = int(value, 0)
    except ValueError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        span = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise UsageProblem(f"{option} {value!r} is not a whole number {span}")
    return number


def check_knob(name: str, value: str, option: str | None = None) -> None:
    """Refuse a value NCCL would reject or misread; `option` is how the user gave it (default: the name)."""
    option = option or name
    if name == "NCCL_ALGO":
        _check_list(name, value, _ALGOS, option)
    elif name == "NCCL_PROTO":
        _check_list(name, value, _PROTOS, option)
    elif name == "NCCL_DEBUG_SUBSYS":
        _check_list(name, value, _SUBSYS, option)
    elif name == "NCCL_DEBUG":
        if value.upper() not in _DEBUG_LEVELS:
            raise UsageProblem(f"{option} {value!r} is not one of {', '.join(_DEBUG_LEVELS)}")
    elif name == "NCCL_BUFFSIZE":
        _check_int(value, option, 1)
    elif name == "NCCL_NSOCKS_PERTHREAD":
        _check_int(value, option, 1, 64)
    elif name == "NCCL_SOCKET_NTHREADS":
        _check_int(value, option, 1, 16)
    elif name == "NCCL_MIN_NCHANNELS":
        _check_int(value, option, 1, 64)


def parse_assignments(pairs: Iterable[str], option: str = "--set") -> dict[str, str]:
    """'K=V' strings into a dict, refusing anything that is not a valid environment assignment."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise UsageProblem(f"{option} {pair!r} is not NAME=VALUE (e.g. {option} NCCL_DEBUG=INFO)")
        out[name] = value
    return out


# --- rendering -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclEnv:
    """The environment for one machine and platform, in the order it should be set."""

    machine_type: str
    flavor: str
    platform: str
    interfaces: Interfaces
    env: dict[str, str]
    overridden: tuple[str, ...]  # names the user set, which the profile did not decide
    prepend: frozenset[str]  # names whose value goes in front of the existing one (LD_LIBRARY_PATH)

    def as_dict(self) -> dict[str, Any]:
        return {
            "machine_type": self.machine_type,
            "flavor": self.flavor,
            "platform": self.platform,
            "host_nics": list(self.interfaces.host),
            "gpu_nics": list(self.interfaces.gpu),
            "env": dict(self.env),
            "prepend": sorted(self.prepend),
            "overridden": list(self.overridden),
        }


def profile_for(machine: MachineType) -> Profile:
    """The profile of a machine type's GPUDirect flavour."""
    return PROFILES[machine.gpudirect]


def render_env(
    machine: MachineType,
    platform: str = "vm",
    overrides: Mapping[str, str] | None = None,
    *,
    flavor: str | None = None,
    source: str = "--set",
) -> NcclEnv:
    """The NCCL environment for `machine` on `platform`, with `overrides` (the user's) winning.

    `flavor` forces a profile other than the machine's own (e.g. "none" to run over sockets);
    `source` says in errors where the overrides came from.
    """
    flavor = flavor or machine.gpudirect
    if flavor not in PROFILES:
        raise UsageProblem(f"NCCL flavor {flavor!r} is not one of {', '.join(FLAVORS)}")
    profile = PROFILES[flavor]
    nics = interface_names(machine, platform)
    if flavor in ("tcpx", "tcpxo") and not nics.gpu:
        raise UsageProblem(
            f"{machine.name} has no GPU NICs, so the {flavor} profile cannot apply; use flavor none"
        )
    values = {
        "socket_ifname": nics.socket_ifname,
        "host_nic": nics.host_nic,
        "gpu_nics": ",".join(nics.gpu),
        "tx_bindings": ";".join(f"{nic}:{cores}" for nic, cores in zip(nics.gpu, _TCPX_TX_CORES, strict=False)),
        "rx_bindings": ";".join(f"{nic}:{cores}" for nic, cores in zip(nics.gpu, _TCPX_RX_CORES, strict=False)),
    }
    merged = {
        **profile.env,
        **profile.platform_env.get(platform, {}),
        **profile.family_env.get(machine.family, {}),
    }
    env = {name: value.format_map(values) for name, value in merged.items()}
    prepend = set()
    if profile.lib_dir:
        env["LD_LIBRARY_PATH"] = profile.lib_dir
        prepend.add("LD_LIBRARY_PATH")
    overrides = dict(overrides or {})
    for name, value in overrides.items():
        check_knob(name, value, f"{source} {name}")
        prepend.discard(name)  # a value the user gives is the whole value
    overridden = tuple(name for name in overrides if env.get(name) != overrides[name])
    env.update(overrides)
    _check_socket_threads(env)
    return NcclEnv(machine.name, flavor, platform, nics, env, overridden, frozenset(prepend))


def _check_socket_threads(env: Mapping[str, str]) -> None:
    # NCCL caps sockets per connection at 64: more is silently clipped, so the user never sees it.
    try:
        product = int(env.get("NCCL_NSOCKS_PERTHREAD", "1")) * int(env.get("NCCL_SOCKET_NTHREADS", "1"))
    except ValueError:
        return
    if product > 64:
        raise UsageProblem(
            f"NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS is {product}; NCCL allows at most 64"
        )


def export_lines(env: Mapping[str, str], prepend: Collection[str] = ()) -> list[str]:
    """`export NAME=value` lines, every value quoted; names in `prepend` keep what the shell already has."""
    lines = []
    for name, value in env.items():
        if name in prepend:
            lines.append(f'export {name}={shlex.quote(value)}"${{{name}:+:${{{name}}}}}"')
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    return lines


def format_shell(nccl_env: NcclEnv) -> str:
    """The environment as shell `export` lines (see export_lines)."""
    return "\n".join(export_lines(nccl_env.env, nccl_env.prepend)) + "\n"


# --- host checks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostCheck:
    """What is missing for a profile: `problems` refuse the start, `warnings` only say so."""

    problems: tuple[str, ...]
    warnings: tuple[str, ...]


def check_host(nccl_env: NcclEnv, root: str | Path = "/") -> HostCheck:
    """Check that the plugin, devices and NICs `nccl_env` relies on exist under `root` (normally /)."""
    root = Path(root)
    profile = PROFILES[nccl_env.flavor]

    def exists(path: str) -> bool:
        return (root / path.lstrip("/")).exists()

    problems = []
    for path in profile.required_paths:
        if not exists(path):
            what = "plugin file" if path.startswith(("/usr/local", "/var/lib")) else "path"
            problems.append(f"the {flavor_title(profile.flavor)} {what} {path} is missing")
    warnings = [f"{path} is missing" for path in profile.advised_paths if not exists(path)]
    tuner = nccl_env.env.get("NCCL_TUNER_CONFIG_PATH")
    if tuner and tuner not in profile.advised_paths and not exists(tuner):
        warnings.append(f"NCCL_TUNER_CONFIG_PATH {tuner} is missing")
    # Every NIC the environment names (profile or override): NCCL fails late and vaguely on a wrong one.
    named = []
    for name, value in nccl_env.env.items():
        if name.endswith(("IFNAME", "CTRL_DEV")) and not value.startswith("^"):
            named += [nic.strip() for nic in value.split(",") if nic.strip() and nic.strip() not in named]
    net_dir = root / "sys" / "class" / "net"
    missing = [nic for nic in named if not (net_dir / nic).exists()]
    if missing:
        have = sorted(p.name for p in net_dir.iterdir()) if net_dir.is_dir() else []
        problems.append(
            f"network interface(s) {', '.join(missing)} not found (this machine has: "
            f"{', '.join(have) or 'none visible'}); is the platform right ({nccl_env.platform})?"
        )
    return HostCheck(tuple(problems), tuple(warnings))


def flavor_title(flavor: str) -> str:
    return {"none": "socket", "tcpx": "GPUDirect-TCPX", "tcpxo": "GPUDirect-TCPXO", "rdma": "gIB RDMA"}[flavor]


# The tuner-plugin config lives in gcpgpu.nccl_tuner; its names stay importable from here.
from gcpgpu.nccl_tuner import (  # noqa: E402,F401
    COLLECTIVES,
    DEFAULT_TUNER_TABLE,
    MAX_BYTES,
    TUNER_ALGOS,
    TUNER_PROTOS,
    TunerRule,
    parse_size,
    tuner_config,
    tuner_rules,
)
