"""The NCCL environment per machine and platform: interface names, knob checks, rendering, host checks.

The data (the Profile per GPUDirect flavour, the VM NIC layouts) lives in gcpgpu.nccl.profiles and
the tuner-plugin config in gcpgpu.nccl.tuner; their names stay importable from here, so callers
keep one seam (`from gcpgpu import nccl`). A profile's values that name network interfaces are
templates: the names differ between a VM and a Kubernetes pod, so `interface_names` derives them
per platform. Anything a user sets wins over the profile.

Nothing here imports a Google library, grpc or torch: the training container's entrypoint runs it
(through gcpgpu.node.launch) before torch starts, and `gcpgpu nccl --help` must stay fast.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcpgpu.catalog import MachineType
from gcpgpu.errors import UsageProblem
from gcpgpu.nccl.profiles import (
    FLAVORS,
    PLATFORMS,
    PROFILES,
    TCPX_RX_CORES,
    TCPX_TX_CORES,
    VM_NIC_PCI,
    Profile,
    flavor_title,
)

# --- interface names -------------------------------------------------------------------------------

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
        (see nccl_profiles.VM_NIC_PCI). A machine with one NIC is not named at all: "^lo,docker" lets NCCL
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
    layout = VM_NIC_PCI.get(machine.family)
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
        "tx_bindings": ";".join(f"{nic}:{cores}" for nic, cores in zip(nics.gpu, TCPX_TX_CORES, strict=False)),
        "rx_bindings": ";".join(f"{nic}:{cores}" for nic, cores in zip(nics.gpu, TCPX_RX_CORES, strict=False)),
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


# The tuner-plugin config lives in gcpgpu.nccl.tuner; its names stay importable from here.
from gcpgpu.nccl.tuner import (  # noqa: E402,F401
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
