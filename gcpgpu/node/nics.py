"""Each NIC's own counters, every second, sent to Cloud Monitoring: what `metrics tail` shows of the network.

Compute Engine's per-instance network metric counts what passes the VM's virtual NICs; GPUDirect RDMA (A3 Ultra,
A4) bypasses the kernel, and whether Compute counts it is unverified (gcpgpu/data/differences.md). So every node
reads its NICs' own counters, under a root that is / on Google Cloud and the node's fake tree in the emulator
(--sysroot; gcpgpu/fakes/guest/nics.py writes it):

  RDMA NICs       /sys/class/infiniband/DEV/ports/P/counters/port_{xmit,rcv}_data (4-byte units) and
                  hw_counters: np_cnp_sent + rp_cnp_handled (congestion notifications), out_of_sequence +
                  packet_seq_err + local_ack_timeout_err (retransmissions)
  Ethernet NICs   /sys/class/net/IF/statistics/{tx,rx}_bytes, {tx,rx}_errors, operstate, speed
  TCP             /proc/net/snmp Tcp RetransSegs (the node's, whichever NIC)

Each NIC is host or GPU fabric by the machine's family (gcpgpu.nccl.interface_names names the GPU gVNICs of A3
High/Mega; the RDMA NICs of A3 Ultra and A4 are fabric; the gVNICs beside them, and A2's one NIC, are host).

The sampler reads every second and, every --interval (10 s; Cloud Monitoring takes one point per series per
5 s at most), writes each NIC's rates over the interval in ONE CreateTimeSeries request, from its own process
(the entrypoint starts it beside torchrun on every node; the emulator as a sidecar), never on the job's path:

  custom.googleapis.com/gcpgpu/nic/{sent_bytes_per_s, recv_bytes_per_s, cnp_per_s, retrans_per_s, errors_per_s,
                                    link_gbps}
  resource generic_task {namespace gcpgpu-cluster, job CLUSTER, task_id NODE}, labels node, nic, role
  (host | fabric | tcp: the node's TCP retransmits, nic "tcp").

A write that fails is logged once and retried with back-off; it never stops the job.

    python -m gcpgpu.node.nics --project P --cluster C --node N [--sysroot /] [--machine-type T] [--pid PID]
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("gcpgpu.node.nics")

NIC_METRIC = "custom.googleapis.com/gcpgpu/nic/"
KEYS = ("sent_bytes_per_s", "recv_bytes_per_s", "cnp_per_s", "retrans_per_s", "errors_per_s")
MIN_INTERVAL_S = 5.0  # Cloud Monitoring: at most one point per time series every 5 seconds
DEFAULT_INTERVAL_S = 10.0
SAMPLE_S = 1.0
MAX_BACKOFF_S = 300.0
_SKIP = ("lo", "docker", "veth", "virbr", "br-")
_RETRANS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err")
_CNP = ("np_cnp_sent", "rp_cnp_handled")


@dataclass
class Reading:
    """One NIC's counters at one moment (bytes, events), its link, and its role."""

    nic: str
    role: str  # host | fabric
    rdma: bool
    up: bool
    gbps: float | None
    counters: dict[str, float] = field(default_factory=dict)  # tx, rx, cnp, retrans, errors


def _num(path: Path) -> float | None:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def roles(machine_type: str | None) -> tuple[set[str], bool]:
    """(the GPU NICs' netdev names, whether the family's GPU NICs are RDMA devices) of a machine type."""
    if not machine_type:
        return set(), False
    from gcpgpu import catalog, nccl

    machine = catalog.machine_types().get(machine_type)
    if machine is None or machine.gpu_nics == 0:
        return set(), False
    if machine.gpudirect == "rdma":
        return set(), True
    try:
        return set(nccl.interface_names(machine, "vm").gpu), False
    except Exception:  # a family without a known VM layout: its NICs all count as host
        return set(), False


def read(sysroot: str | Path, machine_type: str | None) -> tuple[list[Reading], float | None]:
    """Every NIC's counters under `sysroot`, and the node's TCP RetransSegs (None where /proc/net/snmp is absent)."""
    root = Path(sysroot)
    gpu_names, rdma_family = roles(machine_type)
    out: list[Reading] = []
    ib = root / "sys/class/infiniband"
    for dev in sorted(ib.iterdir()) if ib.is_dir() else []:
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            c = port / "counters"
            hw = port / "hw_counters"
            state = (port / "state").read_text() if (port / "state").exists() else ""
            rate = _num(port / "rate")
            out.append(Reading(
                dev.name if port.name == "1" else f"{dev.name}/{port.name}", "fabric" if rdma_family else "host",
                True, "ACTIVE" in state, rate,
                {"tx": (_num(c / "port_xmit_data") or 0.0) * 4, "rx": (_num(c / "port_rcv_data") or 0.0) * 4,
                 "cnp": sum(_num(hw / k) or 0.0 for k in _CNP), "retrans": sum(_num(hw / k) or 0.0 for k in _RETRANS),
                 "errors": sum(_num(c / k) or 0.0 for k in ("symbol_error", "port_rcv_errors", "link_downed"))}))
    net = root / "sys/class/net"
    for dev in sorted(net.iterdir()) if net.is_dir() else []:
        if dev.name.startswith(_SKIP) or (dev / "device/infiniband").exists():
            continue  # loopback, bridges, and an RDMA NIC's own netdev (counted through its ib device)
        s = dev / "statistics"
        speed = _num(dev / "speed")
        operstate = (dev / "operstate").read_text().strip() if (dev / "operstate").exists() else ""
        out.append(Reading(dev.name, "fabric" if dev.name in gpu_names else "host", False, operstate == "up",
                           speed / 1000 if speed and speed > 0 else None,
                           {"tx": _num(s / "tx_bytes") or 0.0, "rx": _num(s / "rx_bytes") or 0.0,
                            "errors": sum(_num(s / k) or 0.0 for k in ("tx_errors", "rx_errors"))}))
    return out, tcp_retrans(root / "proc/net/snmp")


def tcp_retrans(snmp: Path) -> float | None:
    """Tcp RetransSegs from /proc/net/snmp (a header line and a value line, both starting 'Tcp:')."""
    try:
        lines = [line.split() for line in snmp.read_text().splitlines() if line.startswith("Tcp:")]
        return float(lines[1][lines[0].index("RetransSegs")])
    except (OSError, ValueError, IndexError):
        return None


def rates(first: tuple[float, list[Reading], float | None], last: tuple[float, list[Reading], float | None]
          ) -> dict[tuple[str, str], dict[str, float]]:
    """Per (NIC, role): each counter's rate between two samples (per second), and the link's speed. A counter
    that went backwards (a driver reload) counts from zero, never as a negative rate."""
    t0, before, tcp0 = first
    t1, after, tcp1 = last
    dt = max(t1 - t0, 1e-9)
    old = {r.nic: r for r in before}
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in after:
        prev = old.get(r.nic)
        if prev is None:
            continue

        def per_s(key: str, r: Reading = r, prev: Reading = prev) -> float:
            a, b = prev.counters.get(key, 0.0), r.counters.get(key, 0.0)
            return (b - a if b >= a else b) / dt

        values = {"sent_bytes_per_s": per_s("tx"), "recv_bytes_per_s": per_s("rx"), "errors_per_s": per_s("errors"),
                  "link_gbps": (r.gbps or 0.0) if r.up else 0.0}
        if r.rdma:  # congestion and retransmissions are counted per RDMA NIC; TCP's per node (below)
            values.update(cnp_per_s=per_s("cnp"), retrans_per_s=per_s("retrans"))
        out[(r.nic, r.role)] = values
    if tcp0 is not None and tcp1 is not None:
        out[("tcp", "tcp")] = {"retrans_per_s": max(tcp1 - tcp0, 0.0) / dt}
    return out


class Sampler:
    """Reads the NICs every second and writes their rates every interval, from a background thread."""

    def __init__(self, sysroot: str | Path, *, project: str, cluster: str, node: str, machine_type: str | None,
                 location: str = "global", interval_s: float = DEFAULT_INTERVAL_S, client: Any = None,
                 client_factory: Callable[[], Any] | None = None, clock: Callable[[], float] | None = None) -> None:
        from gcpgpu.gcp import clock as gcp_clock

        self.sysroot = sysroot
        self.machine_type = machine_type
        self.project = project
        self.node = node
        self.resource = {"project_id": project, "location": location, "namespace": "gcpgpu-cluster", "job": cluster,
                         "task_id": node}
        self.interval_s = interval_s
        self.clock = clock or gcp_clock.now
        self._client = client
        self._client_factory = client_factory or (lambda: _default_client(project))
        self.first: tuple[float, list[Reading], float | None] | None = None
        self.failures = 0
        self.next_try = 0.0
        self.written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> tuple[float, list[Reading], float | None]:
        readings, tcp = read(self.sysroot, self.machine_type)
        return self.clock(), readings, tcp

    def poll(self) -> bool:
        """One second's reading; a write once the interval is up. True when a write succeeded."""
        now = self.sample()
        if self.first is None:
            self.first = now
            return False
        if now[0] - self.first[0] < self.interval_s or now[0] < self.next_try:
            return False
        return self.flush(now)

    def flush(self, now: tuple[float, list[Reading], float | None] | None = None) -> bool:
        now = now or self.sample()
        if self.first is None or now[0] <= self.first[0]:
            return False
        series = self.series(rates(self.first, now), now[0])
        try:
            client = self._client if self._client is not None else self._client_factory()
            self._client = client
            for i in range(0, len(series), 200):  # CreateTimeSeries takes 200 series a request; a node has ~60
                client.create_time_series(request={"name": f"projects/{self.project}", "time_series": series[i:i + 200]},
                                          timeout=10.0, retry=None)
        except Exception as e:
            self.failures += 1
            self.next_try = now[0] + min(MAX_BACKOFF_S, self.interval_s * 2 ** min(self.failures, 8))
            if self.failures == 1:
                log.warning("cannot write NIC metrics to Cloud Monitoring (%s: %s); the job goes on, retrying",
                            type(e).__name__, str(e)[:200])
            return False
        self.failures = 0
        self.first = now
        self.written += 1
        return True

    def series(self, by_nic: dict[tuple[str, str], dict[str, float]], t: float) -> list[dict]:
        seconds, nanos = int(t), int((t % 1) * 1e9)
        out = []
        for (nic, role), values in sorted(by_nic.items()):
            for key, value in sorted(values.items()):
                out.append({
                    "metric": {"type": NIC_METRIC + key, "labels": {"node": self.node, "nic": nic, "role": role}},
                    "resource": {"type": "generic_task", "labels": self.resource},
                    "metric_kind": "GAUGE", "value_type": "DOUBLE",
                    "points": [{"interval": {"end_time": {"seconds": seconds, "nanos": nanos}},
                                "value": {"double_value": float(value)}}],
                })
        return out

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="gcpgpu-nic-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                self.poll()
            except Exception as e:  # a bug here must not take anything else down
                log.debug("NIC sample failed: %s", e)

    def stop(self, flush: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if flush and self.first is not None and self.clock() - self.first[0] >= MIN_INTERVAL_S:
            self.flush()


def _default_client(project: str) -> Any:
    from gcpgpu.node.reporter import _default_client as client

    return client(project)


def main(argv: list[str] | None = None) -> int:
    import signal

    from gcpgpu.node.reporter import _alive, _metadata

    parser = argparse.ArgumentParser(prog="python -m gcpgpu.node.nics",
                                     description="Send this node's NIC counters to Cloud Monitoring.")
    parser.add_argument("--project")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--node", help="this node's name (default: the metadata server's)")
    parser.add_argument("--machine-type", help="default: the metadata server's")
    parser.add_argument("--location", help="the node's zone (default: the metadata server's)")
    parser.add_argument("--sysroot", default="/", help="the folder standing for / (the emulator's fake tree)")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between writes (>= 5)")
    parser.add_argument("--pid", type=int, help="exit (after a last write) when this process ends")
    parser.add_argument("--emulator", help="HOST:PORT of a gcpgpu emulator ($GCPGPU_EMULATOR)")
    args = parser.parse_args(argv)
    if args.interval < MIN_INTERVAL_S:
        print(f"Error: --interval {args.interval:g} is below {MIN_INTERVAL_S:g} s: Cloud Monitoring refuses "
              "faster writes", file=sys.stderr)
        return 2
    if args.emulator:
        import os

        os.environ["GCPGPU_EMULATOR"] = args.emulator
    project = args.project or _metadata("project/project-id")
    node = args.node or _metadata("instance/name")
    if not project or not node:
        print("Error: no project or node name: pass --project and --node", file=sys.stderr)
        return 2
    machine = args.machine_type or (_metadata("instance/machine-type") or "").rsplit("/", 1)[-1] or None
    location = args.location or (_metadata("instance/zone") or "global").rsplit("/", 1)[-1]
    logging.basicConfig(level=logging.INFO, format="gcpgpu-nic-sampler: %(message)s")
    sampler = Sampler(args.sysroot, project=project, cluster=args.cluster, node=node, machine_type=machine,
                      location=location, interval_s=args.interval)
    found, _tcp = read(args.sysroot, machine)
    log.info("%s: sampling %s every %g s, writing every %g s", node,
             ", ".join(f"{r.nic} ({r.role})" for r in found) or "no NICs", SAMPLE_S, args.interval)
    sampler.start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        if args.pid and not _alive(args.pid):
            break
    sampler.stop(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
