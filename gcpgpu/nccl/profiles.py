"""What Google publishes per GPUDirect flavour for NCCL, as data: the Profiles, the VM NIC layouts.

A machine type's GPUDirect flavour (catalog: none, tcpx, tcpxo, rdma) picks a Profile: the
variables Google publishes for that network (shared/reference/gcp-facts.md section 8), the plugin
the image must carry, and the host paths the plugin needs. Values that name network interfaces
are templates, filled in per machine and platform by gcpgpu.nccl, which also re-exports the names
callers use (nccl.PROFILES, nccl.FLAVORS, ...).

Imports nothing heavy, like gcpgpu.nccl: the training container's entrypoint reads it before torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gcpgpu import resources

FLAVORS = ("none", "tcpx", "tcpxo", "rdma")
PLATFORMS = ("vm", "container", "vertex")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Profile:
    """The NCCL environment for one GPUDirect flavour, and what the host must provide for it.

    Values in `env` may name {socket_ifname}, {host_nic}, {gpu_nics}, {tx_bindings} and
    {rx_bindings}, filled in per machine and platform by gcpgpu.nccl.render_env.
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
TCPX_TX_CORES = ("8-21,112-125", "8-21,112-125", "60-73,164-177", "60-73,164-177")
TCPX_RX_CORES = ("22-35,126-139", "22-35,126-139", "74-87,178-191", "74-87,178-191")

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


# --- VM NIC layouts ------------------------------------------------------------------------------

# PCI (bus, slot) of each NIC on a GCE VM of the family, as Google's published VM recipes name
# them: the guest names a NIC after its PCI address (systemd's predictable naming, enp<bus>s<slot>),
# and GCE places a family's NICs at the same addresses on every VM. "host" NICs carry NCCL's
# bootstrap traffic; "gpu" NICs are the gVNICs a GPUDirect plugin is told about.
# Sources: A3 High from Cluster Toolkit's a3-highgpu-8g nccl-tests script; A3 Mega from its
# a3-megagpu-8g examples and Google's TCPXO docs; A3 Ultra / A4 gVNICs from Cluster Toolkit's
# a3-ultragpu-8g Slurm examples and PerfKitBenchmarker's a4 Dockerfile (their RDMA NICs are not
# netdevs NCCL is told about: gIB finds them through ibverbs). A3 Edge: assumed as A3 High, unverified.
VM_NIC_PCI: Mapping[str, Mapping[str, tuple[tuple[int, int], ...]]] = _frozen(
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


def flavor_title(flavor: str) -> str:
    """The flavour's name in messages (the plugin or transport, not the catalog's short key)."""
    return {"none": "socket", "tcpx": "GPUDirect-TCPX", "tcpxo": "GPUDirect-TCPXO", "rdma": "gIB RDMA"}[flavor]
