"""Send the trainer's own numbers to Cloud Monitoring, without the trainer importing anything of Google's.

The trainer writes JSON lines (`--log-json FILE`, rank 0): step, loss, lr, tokens_per_s (per GPU),
mfu, step_time_s, data_wait_frac, peak_mem_bytes, world_size, warmup. The reporter follows that
file from a background thread (or as a sidecar process) and writes custom metrics with
CreateTimeSeries:

  custom.googleapis.com/gcpgpu/trainer/{tokens_per_s, tokens_per_s_per_gpu, mfu, loss, step_time,
                                        data_wait_fraction, peak_memory, step}

on a generic_task resource (namespace gcpgpu-cluster or gcpgpu-vertex, job = the cluster name or the
Vertex job id, task_id = the node rank), which is what `gcpgpu metrics tail` reads back.

Bounded: at most one point per series per interval (10 s or more; the real API refuses faster
writes), the interval's records averaged, all series in one request. Off the training thread. Soft:
a Monitoring outage is logged once and retried with back-off; it never raises into the trainer,
and a warm-up (compile) interval never counts as throughput.

    python -m gcpgpu.node.reporter --log-json /tmp/train.jsonl --cluster demo --pid $TRAINER_PID
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcpgpu.metrics.sources import NAMESPACE, TRAINER

log = logging.getLogger("gcpgpu.node.reporter")

MIN_INTERVAL_S = 10.0
MAX_BACKOFF_S = 300.0
WRITE_TIMEOUT_S = 10.0
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1"


class JsonLinesTail:
    """Follows a JSON-lines file as it grows: whole lines only, survives the file appearing late or restarting."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""
        self._inode: int | None = None

    def read(self) -> list[dict]:
        try:
            st = self.path.stat()
        except OSError:
            return []  # not written yet
        if self._inode is not None and (st.st_ino != self._inode or st.st_size < self._offset):
            self._offset, self._partial = 0, b""  # replaced or truncated: a new run
        self._inode = st.st_ino
        if st.st_size == self._offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read(max(0, st.st_size - self._offset))
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn or foreign line: skip it, never stop
            if isinstance(record, dict):
                out.append(record)
        return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class Window:
    """The records of one interval, kept as running sums (memory stays flat however long a write fails)."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    peak_memory: float | None = None
    step: float | None = None

    def add(self, record: dict) -> None:
        warm = bool(record.get("warmup"))
        per_gpu = _number(record.get("tokens_per_s"))
        world = _number(record.get("world_size")) or 1.0
        values = {"loss": _number(record.get("loss")), "data_wait_fraction": _number(record.get("data_wait_frac"))}
        if not warm:  # warm-up steps time the compiler, not the trainer
            values.update(tokens_per_s=None if per_gpu is None else per_gpu * world, tokens_per_s_per_gpu=per_gpu,
                          mfu=_number(record.get("mfu")), step_time=_number(record.get("step_time_s")))
        for key, value in values.items():
            if value is not None:
                self.sums[key] = self.sums.get(key, 0.0) + value
                self.counts[key] = self.counts.get(key, 0) + 1
        mem = _number(record.get("peak_mem_bytes"))
        if mem is not None:
            self.peak_memory = mem if self.peak_memory is None else max(self.peak_memory, mem)
        step = _number(record.get("step"))
        if step is not None:
            self.step = step

    def values(self) -> dict[str, float]:
        out = {k: self.sums[k] / self.counts[k] for k in self.sums}
        if self.peak_memory is not None:
            out["peak_memory"] = self.peak_memory
        if self.step is not None:
            out["step"] = self.step
        return out

    def __bool__(self) -> bool:
        return bool(self.sums) or self.peak_memory is not None or self.step is not None


class Reporter:
    """Tails the trainer's JSON log and writes its numbers to Cloud Monitoring at a bounded rate."""

    def __init__(
        self,
        log_json: str | os.PathLike,
        *,
        project: str,
        kind: str,
        name: str,
        task_id: str = "0",
        location: str = "global",
        interval_s: float = MIN_INTERVAL_S,
        client: Any = None,
        client_factory: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if kind not in NAMESPACE:
            raise ValueError(f"kind must be cluster or job, not {kind!r}")
        self.tail = JsonLinesTail(log_json)
        self.project = project
        self.resource = {"project_id": project, "location": location, "namespace": NAMESPACE[kind], "job": name,
                         "task_id": str(task_id)}
        self.interval_s = interval_s
        self._client = client
        self._client_factory = client_factory or (lambda: _default_client(project))
        self.clock = clock
        self.pending = Window()
        self.last_write = 0.0
        self.next_try = 0.0
        self.failures = 0
        self.written = 0  # requests that succeeded
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the loop
    def poll(self) -> bool:
        """Read what the trainer wrote; write a point if the interval is up. True when a write succeeded."""
        for record in self.tail.read():
            self.pending.add(record)
        now = self.clock()
        if not self.pending or now < self.next_try or now - self.last_write < self.interval_s:
            return False
        return self.flush(now)

    def flush(self, now: float | None = None) -> bool:
        """Write the pending interval now (one CreateTimeSeries); never raises."""
        now = self.clock() if now is None else now
        if not self.pending:
            return False
        try:
            client = self._client if self._client is not None else self._client_factory()
            self._client = client
            client.create_time_series(request={"name": f"projects/{self.project}",
                                               "time_series": self._series(now)},
                                      timeout=WRITE_TIMEOUT_S, retry=None)
        except Exception as e:  # an outage, bad credentials, anything: training goes on
            self.failures += 1
            delay = min(MAX_BACKOFF_S, self.interval_s * 2 ** min(self.failures, 8))
            self.next_try = now + delay
            if self.failures == 1:
                log.warning("cannot write training metrics to Cloud Monitoring (%s); training goes on, "
                            "retrying with back-off", _short(e))
            else:
                log.debug("metrics write failed again (%s); next try in %.0f s", _short(e), delay)
            return False
        if self.failures:
            log.warning("training metrics reach Cloud Monitoring again after %d failed write(s)", self.failures)
        self.failures = 0
        self.next_try = 0.0
        self.last_write = now
        self.written += 1
        self.pending = Window()
        return True

    def _series(self, now: float) -> list[dict]:
        seconds, nanos = int(now), int((now % 1) * 1e9)
        out = []
        for key, value in sorted(self.pending.values().items()):
            typed = {"int64_value": int(value)} if key == "step" else {"double_value": value}
            out.append({
                "metric": {"type": TRAINER + key},
                "resource": {"type": "generic_task", "labels": self.resource},
                "metric_kind": "GAUGE",
                "value_type": "INT64" if key == "step" else "DOUBLE",
                "points": [{"interval": {"end_time": {"seconds": seconds, "nanos": nanos}}, "value": typed}],
            })
        return out

    # ------------------------------------------------------------------ background thread
    def start(self) -> Reporter:
        """Run in a daemon thread (it never keeps a finished trainer's process alive)."""
        self._thread = threading.Thread(target=self._run, name="gcpgpu-metrics-reporter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.interval_s / 4)):
            try:
                self.poll()
            except Exception as e:  # a bug here must not take anything else down
                log.debug("reporter poll failed: %s", e)

    def stop(self, flush: bool = True, timeout: float = 15.0) -> None:
        """Stop the thread; write what is pending first unless asked not to (bounded by `timeout`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if flush:
            for record in self.tail.read():
                self.pending.add(record)
            now = self.clock()
            if self.pending and now - self.last_write >= min(self.interval_s, 5.0):
                self.flush(now)


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def _default_client(project: str) -> Any:
    from gcpgpu.gcp.clients import Clients

    return Clients(emulator=os.environ.get("GCPGPU_EMULATOR") or None, project=project).monitoring()


def _metadata(path: str) -> str | None:
    base = os.environ.get("GCPGPU_METADATA_URL", METADATA_URL)
    req = urllib.request.Request(f"{base}/{path}", headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=1) as r:  # noqa: S310 - the metadata server
            return r.read().decode().strip() or None
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    """The sidecar: follow --log-json until the trainer (--pid) ends or a signal arrives, then flush."""
    import signal

    parser = argparse.ArgumentParser(
        prog="python -m gcpgpu.node.reporter",
        description="Send a gcpgpu trainer's --log-json numbers to Cloud Monitoring as custom metrics.")
    parser.add_argument("--log-json", required=True, metavar="FILE", help="the trainer's --log-json file")
    parser.add_argument("--cluster", default=os.environ.get("GCPGPU_CLUSTER"), help="cluster name ($GCPGPU_CLUSTER)")
    parser.add_argument("--job", default=os.environ.get("CLOUD_ML_JOB_ID"), help="Vertex AI job id ($CLOUD_ML_JOB_ID)")
    parser.add_argument("--project", help="project (default: $GOOGLE_CLOUD_PROJECT, then the metadata server)")
    parser.add_argument("--task-id", default=os.environ.get("GCPGPU_NODE_RANK") or os.environ.get("NODE_RANK") or "0")
    parser.add_argument("--location", help="zone or region (default: the VM's zone, else global)")
    parser.add_argument("--interval", type=float, default=MIN_INTERVAL_S, help="seconds between writes (>= 10)")
    parser.add_argument("--pid", type=int, help="exit (after a last write) when this process ends")
    parser.add_argument("--emulator", help="HOST:PORT of a gcpgpu emulator ($GCPGPU_EMULATOR)")
    args = parser.parse_args(argv)

    def usage(message: str) -> int:
        print(f"Error: {message}", file=sys.stderr)
        return 2

    from gcpgpu.jobs.ids import check_vertex_number
    from gcpgpu.metrics.target import check_cluster_name

    try:
        if bool(args.cluster) == bool(args.job):
            return usage("give exactly one of --cluster NAME or --job ID (or set GCPGPU_CLUSTER / CLOUD_ML_JOB_ID)")
        kind, name = ("cluster", check_cluster_name(args.cluster)) if args.cluster else ("job", check_vertex_number(args.job))
    except Exception as e:  # UsageProblem: one line, exit 2
        return usage(str(getattr(e, "message", e)))
    if args.interval < MIN_INTERVAL_S:
        return usage(f"--interval {args.interval:g} is below {MIN_INTERVAL_S:g} s: Cloud Monitoring refuses faster writes")
    if args.emulator:
        os.environ["GCPGPU_EMULATOR"] = args.emulator
    project = (args.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
               or _metadata("project/project-id"))
    if not project:
        return usage("no project: pass --project or set GOOGLE_CLOUD_PROJECT")
    location = args.location or (_metadata("instance/zone") or "global").rsplit("/", 1)[-1]
    logging.basicConfig(level=logging.INFO, format="gcpgpu-metrics-reporter: %(message)s")
    reporter = Reporter(args.log_json, project=project, kind=kind, name=name, task_id=args.task_id,
                        location=location, interval_s=args.interval).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        if args.pid and not _alive(args.pid):
            break
    reporter.stop(flush=True)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child its parent has not reaped yet still answers signal 0
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


if __name__ == "__main__":
    sys.exit(main())
