"""Each emulated node's NICs and the counters its kernel would keep for them, as a fake sysfs on the node's disk.

A real node shows its NICs under /sys and /proc; gcpgpu.node.nics reads them there. Here each node running a
cluster job gets the same files under its own disk (ROOT/nodes/INSTANCE_ID/, the folder a job's node paths
live in), and the same reader is pointed at that folder (its --sysroot):

    sys/class/net/IF/{operstate,speed,mtu,statistics/{tx,rx}_{bytes,packets},statistics/{tx,rx}_errors}
    sys/class/infiniband/mlx5_N/ports/1/{state,rate,counters/port_{xmit,rcv}_{data,packets}}   (4-byte units)
    sys/class/infiniband/mlx5_N/ports/1/hw_counters/{np_cnp_sent,rp_cnp_handled,out_of_sequence,
                                                     packet_seq_err,local_ack_timeout_err}
    proc/net/snmp                                                                              (Tcp: RetransSegs)

Which NICs (NIC_SETS): the host gVNIC(s) every VM has, and the family's GPU NICs: A3 High/Edge four gVNICs for
GPUDirect-TCPX, A3 Mega eight for TCPXO, A3 Ultra and A4 eight RDMA NICs (ConnectX-7, mlx5) beside two gVNICs;
A2 and G2 the host NIC only. Names are the VM guest's (enp<bus>s<slot>, as gcpgpu/nccl/profiles.py's VM_NIC_PCI;
a one-NIC VM's ens4); the RDMA NICs are ib devices (their netdevs are left out).

What the counters follow: the steps the node's job logs (fakes/activity.py). A data-parallel step all-reduces
the gradients: each node sends (and receives) 2 (N - 1) / N x 4 bytes x parameters over the GPU fabric (a ring
over N nodes, fp32 gradients; FSDP's reduce-scatter and two all-gathers 3 (N - 1) / N), the parameters as the
bundled trainer prints them ("model tiny (0.8M params"). The fabric NICs share it evenly; on a family with no GPU
NICs the host NIC carries it. Every NIC of a RUNNING node also moves IDLE_BPS (the metadata server, the agents).

The slow_nic fault (core.Faults, as `cluster doctor --active` already feels it) runs fabric NIC SLOW_NIC_INDEX of
that node at a tenth of its share, with retransmissions (RDMA: out-of-sequence, sequence and ACK-timeout errors;
TCP families: the kernel's RetransSegs) and congestion notifications (CNPs) rising with what it still moves.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..world import read_data
from .diag import SLOW_NIC_INDEX

if TYPE_CHECKING:
    from ..activity import Activity
    from ..core import Clock, Faults

IDLE_BPS = 2.0e3  # bytes/s each NIC of an idle node still moves
TICK_S = 0.1  # how often the counter files are brought up to date (wall clock); a reader sees them this stale
SLOW_SHARE = 0.1  # what a slowed NIC still moves of its share
RETRANS_SHARE = 0.02  # of a slowed NIC's packets, retransmitted
CNP_SHARE = 0.05  # of a slowed NIC's packets, answered with a congestion notification
RING = {"ddp": 2.0, "fsdp": 3.0}  # collective volume per step in units of (N - 1) / N x gradient bytes
SCAN_LINES = 400  # how far into a run's output its start line is looked for
_PARAMS = re.compile(r"\bmodel \S+ \((\d+(?:\.\d+)?)M params")
_PARALLEL = re.compile(r"--parallel[= ](\w+)")

# Host NIC names and GPU NIC names per family (VM guest names; nccl/profiles.py VM_NIC_PCI holds the same).
NIC_SETS: dict[str, dict[str, tuple[str, ...]]] = {
    "a2": {"host": ("ens4",), "gpu": ()},
    "g2": {"host": ("ens4",), "gpu": ()},
    "a3-high": {"host": ("enp0s12",), "gpu": ("enp6s0", "enp12s0", "enp134s0", "enp140s0")},
    "a3-edge": {"host": ("enp0s12",), "gpu": ("enp6s0", "enp12s0", "enp134s0", "enp140s0")},
    "a3-mega": {"host": ("enp0s12",), "gpu": ("enp6s0", "enp7s0", "enp13s0", "enp14s0", "enp134s0", "enp135s0",
                                               "enp141s0", "enp142s0")},
    "a3-ultra": {"host": ("enp0s19", "enp192s20"), "gpu": tuple(f"mlx5_{i}" for i in range(8))},
    "a4": {"host": ("enp0s19", "enp192s20"), "gpu": tuple(f"mlx5_{i}" for i in range(8))},
}


@dataclass(frozen=True)
class Nic:
    name: str
    role: str  # host | fabric
    rdma: bool  # an ib device (counters in 4-byte units, hw_counters) rather than a netdev
    gbps: float
    mtu: int


def nic_set(machine_type: str) -> list[Nic]:
    """The NICs a VM of `machine_type` shows its guest: host gVNIC(s) first, then the GPU NICs."""
    catalog = read_data("gcpgpu", "data/machines.yaml")
    mt = catalog["machine_types"].get(machine_type)
    if mt is None:
        return [Nic("ens4", "host", False, 16.0, 1460)]
    family = {**catalog["families"][mt["family"]], **mt}
    names = NIC_SETS.get(mt["family"], {"host": ("ens4",), "gpu": ()})
    gpu_nics = int(family.get("gpu_nics") or 0)
    total = float(family.get("max_net_gbps") or 16)
    gpu = names["gpu"][:gpu_nics]
    rdma = family.get("gpudirect") == "rdma"
    per_gpu = {"rdma": 400.0, "tcpxo": 200.0, "tcpx": 200.0}.get(str(family.get("gpudirect")), 0.0)
    host_gbps = max(total - per_gpu * len(gpu), 200.0) / len(names["host"]) if gpu else total
    out = [Nic(n, "host", False, host_gbps, int(family.get("gvnic_mtu") or 1460)) for n in names["host"]]
    out += [Nic(n, "fabric", rdma, per_gpu, 4096 if rdma else int(family.get("gpu_nic_mtu") or 8244)) for n in gpu]
    return out


def bytes_per_step(n_params: float, nnodes: int, parallel: str = "ddp") -> float:
    """What one node sends over the fabric per training step (and receives): see the module's docstring."""
    if nnodes < 2:
        return 0.0
    return RING.get(parallel, RING["ddp"]) * (nnodes - 1) / nnodes * 4.0 * n_params


def params_in(text: str) -> float | None:
    """The parameter count the bundled trainer's start line gives ("model tiny (0.8M params, ...")."""
    m = _PARAMS.search(text)
    return float(m.group(1)) * 1e6 if m else None


@dataclass
class _Node:
    """One tracked node: its NICs, its job, and the counters so far."""

    instance_id: str
    name: str
    nics: list[Nic]
    job: str  # the Activity key its steps are logged under
    nnodes: int
    parallel: str
    root: Path
    at: float  # the emulator-clock time the counters were last brought to
    step: float = 0.0  # the job's step at `at`
    counters: dict[str, dict[str, float]] = field(default_factory=dict)
    retrans_segs: float = 0.0
    ended: bool = False
    run: Any = None  # the runner's Run: read for the trainer's start line, and whether it ended
    written: bool = False  # its link files are on disk


class NicTraffic:
    """Keeps the fake sysfs of each node that runs a cluster job, from the job's steps and the world's faults."""

    def __init__(self, activity: Activity | None, faults: Callable[[], Faults | None], clock: Clock) -> None:
        self.activity = activity
        self.faults = faults
        self.clock = clock
        self._nodes: dict[str, _Node] = {}
        self._params: dict[str, float] = {}  # job key -> parameters
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- what the job agent tells it -------------------------------------------------------------
    def track(self, instance_id: str, name: str, machine_type: str, job: str, nnodes: int, argv: list[str],
              root: Path, run: Any = None) -> Path:
        """The node starts job `job`'s process (`run`, the runner's: its lines name the model's size, its end
        the job's): its counters follow that job from now on. Returns its sysroot."""
        found = _PARALLEL.search(" ".join(argv))
        with self._lock:
            old = self._nodes.get(instance_id)
            node = _Node(instance_id, name, nic_set(machine_type), job, nnodes, found.group(1) if found else "ddp",
                         root, self.clock.now(), run=run)
            if old is not None and old.root == root:  # the same VM's kernel: its counters go on from where they were
                node.counters, node.retrans_segs = old.counters, old.retrans_segs
            self._nodes[instance_id] = node
            self._write(node)
        self._start()
        return root

    def end(self, instance_id: str) -> None:
        """The node's job ended: its NICs fall back to idle (the files stay, as a VM's counters do)."""
        with self._lock:
            if instance_id in self._nodes:
                self._nodes[instance_id].ended = True

    def _read_run(self, node: _Node) -> None:
        """The trainer's start line (its parameter count), from the first lines of the node's run; its end."""
        run = node.run
        if run is None:
            return
        if node.job not in self._params:
            for line in run.log_lines()[:SCAN_LINES]:
                if (n := params_in(line.text)) is not None:
                    with self._lock:
                        self._params[node.job] = n
                    break
        if run.done:
            node.ended = True

    def params(self, job: str) -> float | None:
        with self._lock:
            return self._params.get(job)

    def reset(self) -> None:
        with self._lock:
            self._nodes.clear()
            self._params.clear()

    def stop(self) -> None:
        self._stop.set()

    # -- the ticking ------------------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="emulator-nic-counters", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception as e:  # the counters must never take the emulator down
                print(f"gcpgpu emulator: NIC counters: {type(e).__name__}: {e}", flush=True)

    def tick(self) -> None:
        """Bring every tracked node's counters to the emulator's now and write them out."""
        now = self.clock.now()
        faults = self.faults()
        slow = set(faults.slow_nic) if faults is not None else set()
        with self._lock:
            nodes = list(self._nodes.values())
        for node in nodes:
            self._read_run(node)
            self._advance(node, now, self.params(node.job), node.name in slow)
            try:
                self._write(node)
            except OSError:  # the node's disk went (a reset, a deleted VM): nothing to keep up to date
                with self._lock:
                    if self._nodes.get(node.instance_id) is node:
                        del self._nodes[node.instance_id]

    def _step_at(self, node: _Node, t: float) -> float:
        steps = self.activity.steps(node.job) if self.activity is not None else ()
        if not steps:
            return 0.0
        made = np.asarray(steps, dtype=float)
        return float(np.interp(t, made[:, 0], made[:, 1], left=0.0))

    def _advance(self, node: _Node, now: float, n_params: float | None, slowed: bool) -> None:
        dt = max(0.0, now - node.at)
        step = node.step if node.ended else self._step_at(node, now)
        moved = max(0.0, step - node.step) * bytes_per_step(n_params or 0.0, node.nnodes, node.parallel)
        node.at, node.step = now, step
        fabric = [n for n in node.nics if n.role == "fabric"] or node.nics[:1]  # no GPU NICs: the host NIC
        for nic in node.nics:
            c = node.counters.setdefault(nic.name, dict.fromkeys(
                ("tx", "rx", "txp", "rxp", "cnp_sent", "cnp_handled", "oos", "seq_err", "ack_timeout"), 0.0))
            share = moved / len(fabric) if nic in fabric else 0.0
            slow_here = slowed and nic.role == "fabric" and nic.name == _slow_name(node.nics)
            if slow_here:
                share *= SLOW_SHARE
            for way in ("tx", "rx"):
                add = share + IDLE_BPS * dt
                c[way] += add
                c[way + "p"] += add / nic.mtu
            if slow_here and share:
                packets = share / nic.mtu
                c["cnp_sent"] += CNP_SHARE * packets
                c["cnp_handled"] += CNP_SHARE * packets
                if nic.rdma:
                    c["oos"] += RETRANS_SHARE * packets
                    c["seq_err"] += RETRANS_SHARE * packets / 2
                    c["ack_timeout"] += RETRANS_SHARE * packets / 20
                else:
                    node.retrans_segs += RETRANS_SHARE * packets

    # -- the files --------------------------------------------------------------------------------
    def _write(self, node: _Node) -> None:
        """The counter files (the link's own files once: they do not change while the NIC is up)."""
        root = node.root
        if not node.written:
            self._write_links(node)
            node.written = True
        zero = dict.fromkeys(("tx", "rx", "txp", "rxp", "cnp_sent", "cnp_handled", "oos", "seq_err", "ack_timeout"), 0.0)
        for nic in node.nics:
            c = node.counters.get(nic.name) or zero
            if nic.rdma:
                port = root / "sys/class/infiniband" / nic.name / "ports/1"
                for name, value in (("port_xmit_data", c["tx"] / 4), ("port_rcv_data", c["rx"] / 4),
                                    ("port_xmit_packets", c["txp"]), ("port_rcv_packets", c["rxp"])):
                    _put(port / "counters" / name, str(int(value)))
                for name, value in (("np_cnp_sent", c["cnp_sent"]), ("rp_cnp_handled", c["cnp_handled"]),
                                    ("out_of_sequence", c["oos"]), ("packet_seq_err", c["seq_err"]),
                                    ("local_ack_timeout_err", c["ack_timeout"])):
                    _put(port / "hw_counters" / name, str(int(value)))
                continue
            stats = root / "sys/class/net" / nic.name / "statistics"
            for name, value in (("tx_bytes", c["tx"]), ("rx_bytes", c["rx"]), ("tx_packets", c["txp"]),
                                ("rx_packets", c["rxp"])):
                _put(stats / name, str(int(value)))
        out_segs = sum(c["txp"] for n, c in node.counters.items() if not _is_rdma(node.nics, n))
        _put(root / "proc/net/snmp",
             "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab "
             "InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
             f"Tcp: 1 200 120000 -1 12 4 0 0 6 {int(out_segs)} {int(out_segs)} {int(node.retrans_segs)} 0 0 0\n")

    @staticmethod
    def _write_links(node: _Node) -> None:
        root = node.root
        for nic in node.nics:
            if nic.rdma:
                port = root / "sys/class/infiniband" / nic.name / "ports/1"
                _put(port / "state", "4: ACTIVE")
                _put(port / "phys_state", "5: LinkUp")
                _put(port / "rate", f"{nic.gbps:.0f} Gb/sec (4X NDR)")
                _put(port / "link_layer", "Ethernet")
                for name in ("symbol_error", "port_rcv_errors", "link_downed"):
                    _put(port / "counters" / name, "0")
                continue
            net = root / "sys/class/net" / nic.name
            _put(net / "operstate", "up")
            _put(net / "speed", str(int(nic.gbps * 1000)))
            _put(net / "mtu", str(nic.mtu))
            for name in ("tx_errors", "rx_errors", "rx_dropped"):
                _put(net / "statistics" / name, "0")
        lo = root / "sys/class/net/lo"
        _put(lo / "operstate", "unknown")
        _put(lo / "statistics/tx_bytes", "0")
        _put(lo / "statistics/rx_bytes", "0")


def _slow_name(nics: list[Nic]) -> str:
    fabric = [n.name for n in nics if n.role == "fabric"] or [nics[0].name]
    return fabric[min(SLOW_NIC_INDEX, len(fabric) - 1)]


def _is_rdma(nics: list[Nic], name: str) -> bool:
    return any(n.name == name and n.rdma for n in nics)


def _put(path: Path, text: str) -> None:
    """Write a counter file whole (a reader never sees half a number)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + ("" if text.endswith("\n") else "\n"))
    os.replace(tmp, path)


__all__ = ["NIC_SETS", "Nic", "NicTraffic", "bytes_per_step", "nic_set", "params_in"]
