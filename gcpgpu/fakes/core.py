"""Shared machinery of the emulator: errors in Google's wire shape, the clock (clock.py), faults, a request log.

Backends hold state and raise ApiError; front ends (REST, gRPC) turn state and errors into wire
formats. Nothing here knows about a particular API.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .clock import Clock, ClockTimer  # noqa: F401 - the world's clock, kept in its own module

# HTTP status -> the canonical status name Google puts next to the code.
HTTP_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

RFC1035 = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
RFC1035_PATTERN = "(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"


class ApiError(Exception):
    """An error as the real API returns it: HTTP code, reason, message, optional details."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        domain: str = "global",
        details: list[dict] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.domain = domain
        self.details = details or []

    def to_json(self) -> dict:
        """Google's error body: {"error": {"code", "message", "errors": [...], "status", "details"}}."""
        body: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "errors": [{"message": self.message, "domain": self.domain, "reason": self.reason}],
        }
        if self.code in HTTP_STATUS_NAMES:
            body["status"] = HTTP_STATUS_NAMES[self.code]
        if self.details:
            body["details"] = self.details
        return {"error": body}


def not_found(what: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{what}' was not found")


def already_exists(what: str) -> ApiError:
    return ApiError(409, "alreadyExists", f"The resource '{what}' already exists")


def invalid(field_name: str, value: Any, why: str) -> ApiError:
    return ApiError(400, "invalid", f"Invalid value for field '{field_name}': '{value}'. {why}")


def required(field_name: str) -> ApiError:
    return ApiError(400, "required", f"Required field '{field_name}' not specified")


def check_name(field_name: str, name: Any) -> None:
    """Names of Compute resources follow RFC 1035, as the real API enforces."""
    if not isinstance(name, str) or not name:
        raise required(field_name)
    if not RFC1035.match(name):
        raise invalid(field_name, name, f"Must be a match of regex '{RFC1035_PATTERN}'")


def rfc3339(ts: float) -> str:
    """Compute's timestamps: RFC 3339 with milliseconds and a -07:00 style offset (we use UTC)."""
    t = time.gmtime(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int((ts % 1) * 1000):03d}-00:00"


def proto_timestamp(ts: float) -> str:
    """protobuf Timestamp JSON (what Monitoring, Logging and Vertex AI write): UTC with nanoseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1e9):09d}Z"


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch from an RFC 3339 timestamp (Z or an offset, any fraction); ValueError if not one."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text.strip())
    if not match:
        raise ValueError(text)
    base = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    frac = float(match.group(2) or 0)
    tz = match.group(3)
    offset = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return base + frac - offset


def fingerprint(value: Any) -> str:
    """A content fingerprint like Compute's (base64 of a hash), used for optimistic locking."""
    raw = json.dumps(value, sort_keys=True).encode()
    return base64.b64encode(hashlib.sha256(raw).digest()[:8]).decode()


def stable_number(text: str, modulo: int) -> int:
    """A number derived from `text` that is the same in every process (unlike hash(), which is salted)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % modulo


class IdSource:
    """Numeric resource ids (uint64 as decimal strings on the wire), unique per emulator."""

    def __init__(self, start: int = 1000000000000000000) -> None:
        self._next = start
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            value = self._next
            self._next += 1
            return str(value)

    def skip_past(self, used: int) -> None:
        """Never hand out `used` or anything below it again (after loading saved resources)."""
        with self._lock:
            self._next = max(self._next, used + 1)


@dataclass
class Faults:
    """What can go wrong on purpose; deterministic under `seed`.

    capacity:       {zone: {machine_type: VMs still obtainable}}; 0 means stocked out.
    quotas:         {region: {metric: limit}}, overriding the world's defaults.
    error_rate:     share of matching requests answered with one of `error_codes` before reaching
                    the backend (as a flaky front end would).
    error_methods:  HTTP methods the error rate applies to (mutations by default).
    latency_ms:     added to every API request.
    subblock_hosts / block_subblocks: the emulated fabric compact-placed A3/A4 VMs report
                    (resourceStatus.physicalHostTopology); see compute/topology.py.
    operation_seconds: how long an operation takes from PENDING to DONE (None: the world's default).
    preemptions:    instances to take away (see `preempt`): each {instance, kind (preempt | host_error),
                    after_s (seconds into a job running on it) or at (an emulator-clock time), armed}.
                    Settable as `preempt` / `host_error`: "NAME@30s", "NAME@2026-11-23T05:00:00Z",
                    "NAME" (now), or a list of them, from a faults file or `emulator faults --set`.
    preempt_grace_s: a preempted VM's notice: SIGTERM to its job, SIGKILL and TERMINATED this much later
                    (Compute Engine gives Spot VMs 30 s).
    """

    capacity: dict[str, dict[str, int]] = field(default_factory=dict)
    quotas: dict[str, dict[str, float]] = field(default_factory=dict)
    error_rate: float = 0.0
    error_codes: list[int] = field(default_factory=lambda: [503])
    error_methods: list[str] = field(default_factory=lambda: ["POST", "DELETE", "PATCH", "PUT"])
    latency_ms: float = 0.0
    operation_seconds: float | None = None
    seed: int = 0
    preemptions: list[dict] = field(default_factory=list)
    preempt_grace_s: float = 30.0
    subblock_hosts: int = 16  # hosts per sub-block of the emulated fabric (real size unverified)
    block_subblocks: int = 4  # sub-blocks per block (unverified)
    # Issue 28: {instance: {in_s | at, armed}} scheduled maintenance (resourceStatus.upcomingMaintenance),
    # settable as maintenance="NODE@2h" (or a list); nodes whose GPU diagnostics fail / whose GPU
    # NICs run slow (cluster doctor --active), settable as gpu_fault="NODE" / slow_nic="NODE".
    maintenance: dict[str, dict] = field(default_factory=dict)
    gpu_fault: list[str] = field(default_factory=list)
    slow_nic: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self.preemptions = [_preemption(p, "preempt") for p in self.preemptions]

    # -- losing a node ------------------------------------------------------------------------
    def preempt(self, instance: str, after_s: float | None = None, at: float | str | None = None) -> None:
        """Preempt VM `instance` `after_s` seconds into the job running on it (counted from now if one
        runs already), at emulator-clock time `at` (seconds or RFC 3339), or at once when neither is given."""
        self._arm(instance, "preempt", after_s, at)

    def fail_host(self, instance: str, after_s: float | None = None, at: float | str | None = None) -> None:
        """A host error under VM `instance` (no notice: its processes die at once), timed as `preempt`."""
        self._arm(instance, "host_error", after_s, at)

    def _arm(self, instance: str, kind: str, after_s: float | None, at: float | str | None) -> None:
        entry = _preemption({"instance": instance, "kind": kind, "after_s": after_s,
                             "at": parse_rfc3339(at) if isinstance(at, str) else at}, kind)
        with self._lock:
            self.preemptions.append(entry)

    def take_preemptions(self, due: Callable[[dict], bool]) -> list[dict]:
        """Remove and return the armed losses `due(entry)` says have come (the emulator's fault clock asks)."""
        with self._lock:
            fired = [e for e in self.preemptions if due(e)]
            self.preemptions = [e for e in self.preemptions if e not in fired]
        return fired

    # -- knobs used from tests ------------------------------------------------------------
    def stockout(self, zone: str, machine_type: str) -> None:
        self.capacity.setdefault(zone, {})[machine_type] = 0

    def set_capacity(self, zone: str, machine_type: str, count: int) -> None:
        self.capacity.setdefault(zone, {})[machine_type] = count

    def set_quota(self, region: str, metric: str, limit: float) -> None:
        self.quotas.setdefault(region, {})[metric] = limit

    def reseed(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def roll_error(self, method: str) -> int | None:
        """The HTTP code to fail this request with, or None; draws from the seeded stream."""
        if self.error_rate <= 0 or method.upper() not in self.error_methods:
            return None
        with self._lock:
            hit = self._rng.random() < self.error_rate
            return self._rng.choice(self.error_codes) if hit else None

    def take_capacity(self, zone: str, machine_type: str, count: int) -> int:
        """How many of `count` VMs the zone can give now; consumes what it gives."""
        with self._lock:
            left = self.capacity.get(zone, {}).get(machine_type)
            if left is None:
                return count
            given = min(left, count)
            self.capacity[zone][machine_type] = left - given
            return given

    def give_back(self, zone: str, machine_type: str, count: int) -> None:
        """Return capacity taken for a request that did not go ahead."""
        with self._lock:
            if machine_type in self.capacity.get(zone, {}):
                self.capacity[zone][machine_type] += count

    def to_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "quotas": self.quotas,
            "error_rate": self.error_rate,
            "error_codes": self.error_codes,
            "error_methods": self.error_methods,
            "latency_ms": self.latency_ms,
            "operation_seconds": self.operation_seconds,
            "seed": self.seed,
            "preemptions": [dict(e) for e in self.preemptions],
            "preempt_grace_s": self.preempt_grace_s,
            "subblock_hosts": self.subblock_hosts,
            "block_subblocks": self.block_subblocks,
            "maintenance": {k: dict(v) for k, v in self.maintenance.items()},
            "gpu_fault": list(self.gpu_fault),
            "slow_nic": list(self.slow_nic),
        }

    @classmethod
    def keys(cls) -> list[str]:
        """Every setting from_dict takes (faults files, `emulator faults --set`, PUT /_emulator/faults):
        the fields, and `preempt` / `host_error`, which arm a loss."""
        return sorted({*cls.__dataclass_fields__, "preempt", "host_error"})

    @classmethod
    def from_dict(cls, data: dict) -> Faults:
        data = dict(data)
        # `preempt` and `host_error` add to what is armed (the short forms --set and faults files use).
        extra = [_preemption(v, kind) for kind in ("preempt", "host_error") for v in _as_list(data.pop(kind, None))]
        if "maintenance" in data:
            data["maintenance"] = _maintenance(data["maintenance"])
        for key in ("gpu_fault", "slow_nic"):
            if key in data:
                data[key] = [str(x).strip() for x in _as_list(data[key])]
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fault setting(s): {', '.join(sorted(unknown))}; known: {', '.join(cls.keys())}")
        faults = cls(**data)
        faults.preemptions += extra
        return faults

    def update(self, data: dict) -> None:
        fresh = Faults.from_dict({**self.to_dict(), **data})
        self.__dict__.update(fresh.__dict__)


_WHEN = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>s|m|h)?$")


def _as_list(value: Any) -> list:
    return [] if value in (None, "", []) else list(value) if isinstance(value, (list, tuple)) else [value]


def _maintenance(value: Any) -> dict[str, dict]:
    """{instance: {in_s, at, armed}} from a dict of them, "NODE@2h", "NODE@<RFC 3339>" or a list of those."""
    if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
        return {k: dict(v) for k, v in value.items()}
    out = {}
    for item in _as_list(value):
        name, _, when = str(item).partition("@")
        entry: dict[str, Any] = {"in_s": 0.0, "at": None, "armed": None}
        when = when.strip()
        m = _WHEN.match(when) if when else None
        if m:
            entry["in_s"] = float(m.group("n")) * {"s": 1, "m": 60, "h": 3600}[m.group("unit") or "s"]
        elif when:
            try:
                entry["at"] = parse_rfc3339(when)
            except ValueError:
                raise ValueError(f"maintenance={item!r}: after '@' give a delay (30m, 2h) or an RFC 3339 time") from None
        out[name.strip()] = entry
    return out


def _preemption(value: Any, kind: str) -> dict:
    """An armed loss from "NAME", "NAME@30s" (into a running job), "NAME@<RFC 3339>" or a dict."""
    if isinstance(value, str):
        name, _, when = value.partition("@")
        entry: dict[str, Any] = {"instance": name.strip(), "kind": kind, "after_s": None, "at": None}
        when = when.strip()
        if when:
            m = _WHEN.match(when)
            if m:
                entry["after_s"] = float(m.group("n")) * {"s": 1, "m": 60, "h": 3600}[m.group("unit") or "s"]
            else:
                try:
                    entry["at"] = parse_rfc3339(when)
                except ValueError:
                    raise ValueError(f"{kind}={value!r}: after '@' give a duration (30s, 2m) or an RFC 3339 "
                                     "time (2026-11-23T05:00:00Z)") from None
    elif isinstance(value, dict):
        entry = {"instance": value.get("instance"), "kind": value.get("kind", kind),
                 "after_s": value.get("after_s"), "at": value.get("at"), "armed": value.get("armed")}
    else:
        raise ValueError(f"{kind}: {value!r} is not NAME, NAME@30s or NAME@TIME")
    if not isinstance(entry["instance"], str) or not RFC1035.match(entry["instance"]):
        raise ValueError(f"{kind}: {entry['instance']!r} is not an instance name")
    if entry["kind"] not in ("preempt", "host_error"):
        raise ValueError(f"{kind}: kind {entry['kind']!r} is not preempt or host_error")
    for key in ("after_s", "at"):
        if entry.get(key) is not None:
            entry[key] = float(entry[key])
            if entry[key] < 0:
                raise ValueError(f"{kind}: {key} {entry[key]} is negative")
    entry.setdefault("armed", None)
    return entry


@dataclass
class LoggedRequest:
    api: str
    method: str
    path: str
    query: str
    status: int
    seconds: float


class RequestLog:
    """Every API request the emulator answered, so tests can count calls (or prove there were none)."""

    def __init__(self) -> None:
        self._items: list[LoggedRequest] = []
        self._lock = threading.Lock()

    def add(self, item: LoggedRequest) -> None:
        with self._lock:
            self._items.append(item)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def all(self, api: str | None = None, method: str | None = None, contains: str | None = None) -> list[LoggedRequest]:
        with self._lock:
            items = list(self._items)
        return [
            r
            for r in items
            if (api is None or r.api == api)
            and (method is None or r.method == method)
            and (contains is None or contains in r.path)
        ]


def write_private(target: Path, data: Any) -> None:
    """`data` as JSON in `target`, readable by its owner alone from the first byte written (the emulator's state
    file holds Secret Manager's payloads), and whole: a crash mid-write never leaves half a file."""
    tmp = target.with_suffix(target.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a .tmp left by a crash keeps its old mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, target)
