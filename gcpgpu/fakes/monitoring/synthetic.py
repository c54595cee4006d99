"""Plausible metrics for emulated VMs and Vertex jobs, made up deterministically from a seed.

No GPU exists here, so the emulator invents what Cloud Monitoring would hold for a VM, following
what runs on it (fakes/activity.py, written by the job agent): while a job runs, network counters
at a share of the machine's bandwidth, busy GPUs (Ops Agent utilization, memory per memory_state,
DCGM profiling rates) and CPUs, each in proportion to the steps the job made in the sample's period
against its own usual pace (a job that logs no step counts as busy all its run); the rest of a
RUNNING VM's time, idle ones: no steps, no traffic. Every rate stays within the machine's limits:
its own network bandwidth (per machine type in machines.yaml), NVLink only between a machine's GPUs
(none on a one-GPU machine). Vertex AI's training metrics follow its jobs. The same seed, VM and
time give the same value in every process. Samples come every 60 s from the moment the VM is
RUNNING, as the agents' default collection interval does, with a little per-sample noise.

A straggler knob makes one VM (or one of its GPUs) slow: its GPU utilization, profiling rates and
network throughput are scaled down by the given factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources

import numpy as np
import yaml

from ..core import stable_number
from .catalog import AGENT, BUILTIN, COMPUTE, NET, VERTEX

Samples = tuple["np.ndarray", "np.ndarray", "np.ndarray"]  # start times, end times, values
Batch = tuple["np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray"]  # indexes, start times, end times, values[row]
SAMPLE_S = 60.0

IDLE_BPS = 2.0e3  # bytes/s an idle VM still moves (metadata server, agents' uploads)
IDLE_MEMORY = 0.006  # share of GPU memory NVML reports used with no process (driver reservations)
VM_OWN = (COMPUTE + "cpu/utilization", COMPUTE + "uptime", COMPUTE + "uptime_total")
NVLINK_SHARE = 0.3  # of a GPU's NVLink bandwidth a data-parallel step keeps busy, averaged over a sample
GAUGE_WINDOW_S = 10.0  # a gauge (NVML, DCGM) reads the last moments: the steps made in these seconds
PIPES = {"tensor": 0.62, "fp16": 0.35, "fp32": 0.12, "fp64": 0.01}


@cache
def _catalog() -> dict:
    # The machine catalog read as data, as the emulator's world does: nothing above fakes/ is imported.
    return yaml.safe_load(resources.files("gcpgpu").joinpath("data/machines.yaml").read_text())


def machine_facts(machine_type: str) -> tuple[int, float, str, float, bool]:
    """(GPUs, GPU memory bytes each, GPU model, max network Gbit/s, has GPU NICs) for a machine type."""
    cat = _catalog()
    m = cat["machine_types"].get(machine_type)
    if m is None:
        return 0, 0.0, "", 16.0, False
    fam = cat["families"].get(m.get("family"), {})
    gpu = cat["gpus"].get(m.get("gpu"), {})
    gbps = float(m.get("max_net_gbps", fam.get("max_net_gbps", 16)))
    nics = int(m.get("gpu_nics", fam.get("gpu_nics", 0)) or 0)
    return int(m.get("gpu_count", 0)), float(gpu.get("memory_gib", 0)) * 2**30, f"NVIDIA {gpu.get('model', 'GPU')}", gbps, nics > 0


def nvlink_bytes(machine_type: str) -> float:
    """A GPU's NVLink bandwidth in bytes/s, both directions together; 0 where its GPUs have no peer on
    NVLink (a one-GPU machine, or GPUs without NVLink such as the L4)."""
    cat = _catalog()
    m = cat["machine_types"].get(machine_type) or {}
    if int(m.get("gpu_count", 0)) < 2:
        return 0.0
    return float(cat["gpus"].get(m.get("gpu"), {}).get("nvlink_gbytes_per_s") or 0) * 1e9


def _mix(seed: int | np.ndarray, k: np.ndarray) -> np.ndarray:
    """Deterministic noise in [-1, 1] for samples k of a series, or of many (seeds as a column): splitmix64."""
    seeds = np.asarray(seed, dtype=np.uint64)
    if seeds.ndim:
        seeds = seeds[:, None]
    with np.errstate(over="ignore"):
        z = seeds + (k.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z & np.uint64(0xFFFFFF)).astype(np.float64) / 0x7FFFFF - 1.0


@dataclass
class Knobs:
    """What tests (and `configure`) turn: stragglers, which agents report, Vertex jobs, on/off."""

    enabled: bool = True
    stragglers: dict[str, tuple[float, int | None]] = field(default_factory=dict)  # VM name -> (factor, gpu)
    ops_agent: bool = True
    dcgm: bool = True
    agent_overrides: dict[str, dict[str, bool]] = field(default_factory=dict)  # VM name -> {"ops_agent": b}
    jobs: dict[str, dict] = field(default_factory=dict)  # job id -> {project, replicas, machine_type, start}
    # The Ops Agent's collection_interval for GPU metrics: its nvml receiver takes the hostmetrics
    # receiver's (ops-agent apps/hostmetrics.go), 60 s unless the agent's config sets another.
    agent_interval_s: float = SAMPLE_S

    def agent(self, name: str, which: str) -> bool:
        return self.agent_overrides.get(name, {}).get(which, getattr(self, which))


@dataclass(frozen=True)
class Vm:
    """What the generator needs of one emulated instance (copied out of the Compute backend)."""

    project: str
    id: str
    name: str
    zone: str
    machine_type: str
    labels: dict[str, str]
    running: tuple[tuple[float, float | None], ...]  # [start, end) spans in RUNNING state
    busy: tuple[tuple[float, float | None], ...] = ()  # [start, end) spans a job ran on it (fakes/activity.py)
    steps: tuple[tuple[tuple[float, int], ...], ...] = ()  # per busy span, the (time, step)s its job logged


@dataclass
class Synthetic:
    """One generated time series: its header and a function giving its samples within [start, end].

    `sample(start, end)` returns (start times, end times, values) as numpy arrays: a 64-node query
    makes thousands of points, and numpy keeps that to milliseconds.
    """

    metric_type: str
    metric_labels: dict[str, str]
    resource_type: str
    resource_labels: dict[str, str]
    user_labels: dict[str, str]
    system_labels: dict[str, str]
    sample: Callable[[float, float], Samples] | None = None
    gpu: tuple | None = None  # (vm, gpu number, variant labels, slowdown, memory bytes): generated per VM in one go
    net: tuple | None = None  # (vm, rate, per sample, seed): a NIC counter, generated with its peers' in one go


def _sample_times(spans: tuple[tuple[float, float | None], ...], start: float, end: float,
                  period: float = SAMPLE_S) -> tuple[np.ndarray, np.ndarray]:
    """(sample indexes, times) of the samples every `period` s inside [start, end] while running."""
    ks, ts = [], []
    for s0, s1 in spans:
        hi = end if s1 is None else min(end, s1)
        if hi < s0:
            continue
        k0 = max(0, math.ceil((start - s0) / period))
        k1 = math.floor((hi - s0) / period)
        if k1 >= k0:
            k = np.arange(k0, k1 + 1, dtype=np.int64)
            ks.append(k)
            ts.append(s0 + k * period)
    if not ks:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    return (ks[0], ts[0]) if len(ks) == 1 else (np.concatenate(ks), np.concatenate(ts))


@lru_cache(maxsize=65536)
def _uuid(seed: int, vm_id: str, gpu: int) -> str:
    return f"GPU-{_seed_of(f'{seed}/{vm_id}/{gpu}') % 16**8:08x}-{vm_id[-4:]}"


@lru_cache(maxsize=65536)
def _seed_of(text: str) -> int:
    # sha256 per series is the slow part of a 64-node query; the same series come back every refresh.
    return stable_number(text, 2**62)


def _busy_share(busy: tuple[tuple[float, float | None], ...], t: np.ndarray) -> np.ndarray:
    """For each DELTA sample ending at t, the share of its minute (t - 60 s, t] in which a job ran on the VM."""
    out = np.zeros(len(t))
    for b0, b1 in busy:
        hi = t if b1 is None else np.minimum(t, b1)
        out += np.clip(hi - np.maximum(t - SAMPLE_S, b0), 0.0, None)
    return np.clip(out / SAMPLE_S, 0.0, 1.0)


def _busy_at(busy: tuple[tuple[float, float | None], ...], t: np.ndarray) -> np.ndarray:
    """For each GAUGE sample at t, 1 where a job ran on the VM at that instant (NVML reads the moment), else 0."""
    out = np.zeros(len(t))
    for b0, b1 in busy:
        out = np.maximum(out, ((t >= b0) & (t < (np.inf if b1 is None else b1))).astype(float))
    return out


@lru_cache(maxsize=256)
def _pace(steps: tuple[tuple[float, int], ...]) -> tuple[np.ndarray, np.ndarray, float]:
    """(times, steps, usual steps/s) of a job's progress: its usual pace is the 90th percentile of its rates
    between the points recorded (a second or more apart), so a job at its usual speed is fully busy."""
    made = np.asarray(steps, dtype=float)
    ts, ss = made[:, 0], made[:, 1]
    dt, ds = np.diff(ts), np.diff(ss)
    rates = ds[dt > 0] / dt[dt > 0]
    return ts, ss, float(np.percentile(rates, 90)) if len(rates) else 0.0


def _load(busy: tuple[tuple[float, float | None], ...], steps: tuple, t: np.ndarray, window: float,
          instant: bool = False) -> np.ndarray:
    """For each sample ending at t, how busy the VM was over (t - window, t], 0 to 1: the steps its job made
    then against its usual pace, or where the job logs no steps the share of the window it ran (`instant`:
    whether it ran at t, as a gauge reads the moment)."""
    out = np.zeros(len(t))
    for i, (b0, b1) in enumerate(busy):
        hi = t if b1 is None else np.minimum(t, b1)
        lo = np.minimum(np.maximum(t - window, b0), hi)
        made = steps[i] if i < len(steps) else ()
        if len(made) < 2:
            out += ((t >= b0) & (t < (np.inf if b1 is None else b1))) if instant else (hi - lo) / window
            continue
        ts, ss, pace = _pace(made)
        if pace > 0:
            out += np.clip(np.interp(hi, ts, ss) - np.interp(lo, ts, ss), 0.0, None) / window / pace
    return np.clip(out, 0.0, 1.0)


class Generator:
    """Builds the synthetic series of one metric type for a project's VMs and jobs."""

    def __init__(self, seed: int, knobs: Knobs, now: float) -> None:
        self.seed = seed
        self.knobs = knobs
        self.now = now
        self._time_cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._fixed_cache: dict[tuple, dict] = {}

    def _series_seed(self, *parts: object) -> int:
        return _seed_of("/".join(str(p) for p in (self.seed, *parts)))

    def _times(self, vm: Vm, start: float, end: float, delta: bool = False,
               period: float = SAMPLE_S) -> tuple[np.ndarray, ...]:
        """(sample indexes, times, busy, load) of a VM's samples: computed once per VM and query.

        busy: for a gauge, whether a job ran at the sample's instant; for a DELTA counter, the share of
        the minute it counts. load: how busy the job kept it (_load): over the minute a counter counts, over
        the last moments a gauge reads.
        """
        key = (vm.id, vm.running, vm.busy, vm.steps, start, end, delta, period)
        cached = self._time_cache.get(key)
        if cached is None:
            k, t = _sample_times(vm.running, start, min(end, self.now), period)
            cached = (k, t, (_busy_share if delta else _busy_at)(vm.busy, t),
                      _load(vm.busy, vm.steps, t, SAMPLE_S) if delta else
                      _load(vm.busy, vm.steps, t, GAUGE_WINDOW_S, instant=True))
            self._time_cache[key] = cached
        return cached

    def for_vms(self, metric_type: str, vms: list[Vm]) -> list[Synthetic]:
        if not self.knobs.enabled or metric_type not in BUILTIN or metric_type.startswith(VERTEX):
            return []
        out: list[Synthetic] = []
        for vm in vms:
            gpus, mem_bytes, model, gbps, gpu_nics = machine_facts(vm.machine_type)
            resource = {"project_id": vm.project, "instance_id": vm.id, "zone": vm.zone}
            system = {"name": vm.name, "machine_type": vm.machine_type}
            factor, slow_gpu = self.knobs.stragglers.get(vm.name, (1.0, None))
            if metric_type in VM_OWN:
                out.append(Synthetic(metric_type, {"instance_name": vm.name}, "gce_instance", resource, vm.labels,
                                     system, self._vm_own(vm, metric_type, factor if slow_gpu is None else 1.0)))
                continue
            if metric_type.startswith(COMPUTE) and not metric_type.startswith(NET):
                continue  # a descriptor without made-up data (disks, firewall, GPU NICs...)
            if metric_type.startswith(NET):
                for lb in ("false",):
                    out.append(Synthetic(metric_type, {"instance_name": vm.name, "loadbalanced": lb}, "gce_instance",
                                         resource, vm.labels, system,
                                         net=self._net_spec(vm, metric_type, gbps, gpu_nics,
                                                            factor if slow_gpu is None else 1.0)))
                continue
            which = "ops_agent" if metric_type.startswith(AGENT) else "dcgm"
            if gpus == 0 or not self.knobs.agent(vm.name, which):
                continue
            if metric_type.endswith("nvlink_traffic_rate") and not nvlink_bytes(vm.machine_type):
                continue  # no NVLink on this machine (one GPU, or none between its GPUs): no series, not zeros
            for g in range(gpus):
                f = factor if slow_gpu is None or slow_gpu == g else 1.0
                base = {"gpu_number": str(g), "model": model, "uuid": _uuid(self.seed, vm.id, g)}
                for extra in self._variants(metric_type):
                    # Values are made later, only for the series the filter keeps, a VM's GPUs together.
                    out.append(Synthetic(metric_type, {**base, **extra}, "gce_instance", resource, vm.labels, system,
                                         gpu=(vm, g, extra, f, mem_bytes)))
        return out

    def plan(self, items: list[Synthetic]) -> list[tuple]:
        """How sample_batches takes `items`: GPU series of VMs that ran (and were busy) over the same spans
        share their sample times and are one numpy pass, whatever the cluster's size (a 1,024-node query
        is 8,192 GPU series); a NIC counter's series of all such VMs likewise; the rest one by one.
        Rows of (is NIC, metric type, indexes, specs) or (None, None, [index], None)."""
        per_vm: dict[tuple, list[int]] = {}
        rows: list[tuple] = []
        for i, item in enumerate(items):
            spec = item.gpu if item.gpu is not None else item.net
            if spec is not None:
                vm = spec[0]
                per_vm.setdefault((item.gpu is None, item.metric_type, vm.running, vm.busy, vm.steps), []).append(i)
            elif item.sample is not None:
                rows.append((None, None, [i], None))
        for (net, metric_type, _running, _busy, _steps), indexes in per_vm.items():
            specs = [items[i].net if net else items[i].gpu for i in indexes]
            rows.append((net, metric_type, indexes, specs))
        return rows

    def sample_batches(self, items: list[Synthetic], start: float, end: float,
                       plan: list[tuple] | None = None) -> list[Batch]:
        """Samples of every series in [start, end] as batches: (the series' indexes in `items`, start
        times, end times, values with a row per series), the series of a batch sharing their times.
        `plan` is plan(items), when the caller keeps it between calls."""
        out: list[Batch] = []
        for net, metric_type, indexes, specs in plan if plan is not None else self.plan(items):
            if net is None:
                s0, t, v = items[indexes[0]].sample(start, end)  # type: ignore[misc]
                out.append((np.asarray(indexes), s0, t, np.asarray(v)[None, :]))
            elif net:
                out.append((np.asarray(indexes), *self._net_batch(specs, start, end)))
            else:
                out.append((np.asarray(indexes), *self._gpu_batch(metric_type, specs, start, end)))
        return out

    @staticmethod
    def _variants(metric_type: str) -> list[dict[str, str]]:
        if metric_type.endswith("pipe_utilization"):
            return [{"pipe": p} for p in PIPES]
        if metric_type.endswith("traffic_rate"):
            return [{"direction": "tx"}, {"direction": "rx"}]
        if metric_type.endswith("memory/bytes_used"):
            return [{"memory_state": "used"}, {"memory_state": "free"}]
        return [{}]

    def _net_spec(self, vm: Vm, metric_type: str, gbps: float, gpu_nics: bool, factor: float) -> tuple:
        """(vm, bytes/s while busy, bytes or packets per byte-second sample, noise seed) of a NIC counter."""
        seed = self._series_seed(vm.id, metric_type)
        node_seed = self._series_seed(vm.id, "net")
        # This node's steady share of its bandwidth: peers in one all-reduce move about the same bytes.
        share = 0.36 + 0.04 * (node_seed % 1000) / 1000.0
        rate = gbps * 1e9 / 8 * share * factor * (0.97 if "received" in metric_type else 1.0)
        per_sample = SAMPLE_S / (8192.0 if gpu_nics else 1460.0) if "packets" in metric_type else SAMPLE_S
        return vm, rate, per_sample, seed

    def _network(self, vm: Vm, metric_type: str, gbps: float, gpu_nics: bool, factor: float) -> Callable[[float, float], Samples]:
        spec = self._net_spec(vm, metric_type, gbps, gpu_nics, factor)

        def sample(start: float, end: float) -> Samples:
            s0, t, values = self._net_batch([spec], start, end)
            return s0, t, values[0]

        return sample

    def _net_batch(self, specs: list[tuple], start: float, end: float) -> Samples:
        """Samples of NIC counters of VMs with the same running and busy spans: a row of values each."""
        k, t, _busy, load = self._times(specs[0][0], start, end, delta=True)
        rate = np.array([s[1] for s in specs])[:, None]
        per_sample = np.array([s[2] for s in specs])[:, None]
        seeds = np.array([s[3] for s in specs], dtype=np.uint64)
        # A job's all-reduce traffic, bytes in proportion to its steps; an idle VM only talks to the
        # metadata server and agents.
        bps = (rate * (1 + 0.03 * _mix(seeds, k)) * load
               + IDLE_BPS * (1 + 0.3 * _mix(seeds + np.uint64(1), k)))
        values = np.floor(bps * per_sample)  # DELTA: what was counted in the last minute
        return t - SAMPLE_S, t, values

    def _vm_own(self, vm: Vm, metric_type: str, factor: float) -> Callable[[float, float], Samples]:
        """Compute Engine's own per-VM series: CPU utilization (busy while a job runs) and uptime."""
        seed = self._series_seed(vm.id, metric_type)
        first = vm.running[0][0] if vm.running else 0.0

        def sample(start: float, end: float) -> Samples:
            k, t, _busy, load = self._times(vm, start, end)
            if metric_type.endswith("cpu/utilization"):  # a fraction: data loaders and NCCL threads while training
                return t, t, np.clip(0.012 + 0.004 * _mix(seed, k) + 0.32 * factor * load, 0.0, 1.0)
            if metric_type.endswith("uptime"):  # DELTA: seconds it ran in the last minute
                return t - SAMPLE_S, t, np.full(len(t), SAMPLE_S)
            return t, t, np.floor(t - first)  # uptime_total: seconds since it started

        return sample

    def _gpu(self, vm: Vm, g: int, metric_type: str, extra: dict[str, str], mem_bytes: float,
             factor: float) -> Callable[[float, float], Samples]:
        # Vertex AI's own metrics, every 60 s whatever the Ops Agent's interval.
        def sample(start: float, end: float) -> Samples:
            s0, t, values = self._gpu_batch(metric_type, [(vm, g, extra, factor, mem_bytes)], start, end, SAMPLE_S)
            return s0, t, values[0]

        return sample

    def _gpu_batch(self, metric_type: str, specs: list[tuple], start: float, end: float,
                   period: float | None = None) -> Samples:
        """Samples of several GPU series of VMs with the same running and busy spans: a row of values
        each, sharing their sample times and wave."""
        vm = specs[0][0]
        k, t, busy, load = self._times(vm, start, end, period=period or self.knobs.agent_interval_s)
        name = metric_type.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
        fixed = self._fixed(metric_type, name, specs)
        mix = _mix(fixed["seeds"], k)
        if name == "bytes_used":
            # NVML's memory by state: what the job's process holds while it runs, a driver's sliver when idle.
            share, total = fixed["share"], fixed["total"]
            # One noise per GPU, not per state: a GPU's used and free add up to its memory.
            gpu_mix = _mix(fixed["gpu_seeds"], k)
            used = total * (IDLE_MEMORY + (share[:, None] * (1 + 0.002 * gpu_mix) - IDLE_MEMORY) * busy[None, :])
            values = np.floor(np.where(fixed["free_rows"], total - used, used))
        else:
            # Everything else follows the GPU's utilization u (percent), scaled into its own unit.
            scales, factors = fixed["scales"], fixed["factors"]
            # As busy as the job's steps kept it over the sample's period (fully at its usual pace), 0 when idle.
            busy_pct = (94.0 + 1.5 * mix) * factors[:, None] * load[None, :]
            values = np.clip(busy_pct, 0.0, 100.0) * scales[:, None]
            if name.endswith("traffic_rate"):
                values = np.floor(values)
        return t, t, values

    def _fixed(self, metric_type: str, name: str, specs: list[tuple]) -> dict[str, np.ndarray]:
        """What does not change with time in a batch of GPU series (seeds, shares, scales): worked out
        once per batch while the generator is kept (backend._matching), not on every call."""
        key = (metric_type, len(specs), *(id(x) for x in specs[:1] + specs[-1:]))
        cached = self._fixed_cache.get(key)
        if cached is not None and cached["specs"] == specs:
            return cached
        out: dict = {"specs": list(specs), "seeds": np.array(
            [self._series_seed(v.id, g, metric_type, *extra.values()) for v, g, extra, _f, _m in specs], dtype=np.uint64)}
        if name == "bytes_used":
            out["share"] = np.array([0.70 + 0.06 * (self._series_seed(v.id, g, "mem") % 1000) / 1000.0
                                     for v, g, _e, _f, _m in specs])
            out["total"] = np.array([m for _vm, _g, _e, _f, m in specs])[:, None]
            out["gpu_seeds"] = np.array([self._series_seed(v.id, g, metric_type) for v, g, _e, _f, _m in specs],
                                        dtype=np.uint64)
            out["free_rows"] = np.array([e.get("memory_state") == "free" for _vm, _g, e, _f, _m in specs])[:, None]
        else:
            base = {"utilization": 1.0, "sm_utilization": 0.0086, "sm_occupancy": 0.0041, "dram_utilization": 0.0048,
                    "pcie_traffic_rate": 6e9 / 100}.get(name, 1.0)
            # NVLink per direction: a share of half the GPU's NVLink bandwidth; none without an NVLink peer.
            out["scales"] = np.array([PIPES.get(extra.get("pipe", ""), 0.0) / 100 if name == "pipe_utilization"
                                      else nvlink_bytes(v.machine_type) / 2 * NVLINK_SHARE / 100
                                      if name == "nvlink_traffic_rate" else base for v, _g, extra, _f, _m in specs])
            out["factors"] = np.array([f for _vm, _g, _e, f, _m in specs])
        if len(self._fixed_cache) >= 256:  # batches made afresh each call (a Vertex task's) must not pile up
            self._fixed_cache.clear()
        self._fixed_cache[key] = out
        return out

    def for_jobs(self, metric_type: str, project: str) -> list[Synthetic]:
        if not self.knobs.enabled or not metric_type.startswith(VERTEX) or metric_type not in BUILTIN:
            return []
        out: list[Synthetic] = []
        for job_id, job in self.knobs.jobs.items():
            if job["project"] not in (None, project):
                continue
            gpus, _mem, _model, gbps, gpu_nics = machine_facts(job["machine_type"])
            if gpus == 0 and "/accelerator/" in metric_type:
                continue  # a CPU-only job has no accelerator metrics
            spans = ((float(job["start"]), job.get("end")),)
            for r in range(int(job["replicas"])):
                task = f"workerpool0-{r}" if r == 0 else f"workerpool1-{r - 1}"
                factor = job.get("stragglers", {}).get(task, 1.0)
                # Busy while it runs, as its replicas' steps say where they logged any.
                vm = Vm(project, f"{job_id}{r}", task, "", job["machine_type"], {}, spans, spans,
                        (tuple(job.get("steps") or ()),))
                labels = {"project_id": project, "job_id": job_id, "task_name": task}
                if metric_type.startswith(VERTEX + "network/"):
                    kind = NET + ("sent_bytes_count" if "sent" in metric_type else "received_bytes_count")
                    fn = self._network(vm, kind, gbps, gpu_nics, factor)
                else:
                    inner = {"accelerator/utilization": AGENT + "utilization", "cpu/utilization": AGENT + "utilization",
                             "accelerator/memory/utilization": AGENT + "memory/bytes_used"}[metric_type[len(VERTEX):]]
                    fn = self._fraction(vm, inner, factor, cpu=metric_type.endswith("cpu/utilization"))
                out.append(Synthetic(metric_type, {}, "cloudml_job", labels, {}, {}, fn))
        return out

    def _fraction(self, vm: Vm, inner: str, factor: float, cpu: bool) -> Callable[[float, float], Samples]:
        # Vertex reports fractions of what the task was given: the node's mean GPU use, or its memory share.
        memory = inner.endswith("bytes_used")
        gpu = self._gpu(vm, 0, inner, {}, 1e9 if memory else 1.0, factor)  # 1e9 "bytes": a share, kept whole
        scale = (0.3 if cpu else 1.0) / (1e9 if memory else 100.0)

        def sample(start: float, end: float) -> Samples:
            s0, t, v = gpu(start, end)
            return s0, t, v * scale

        return sample
