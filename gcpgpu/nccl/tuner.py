"""The NCCL tuner-plugin config: a declarative table of byte ranges per collective, checked and
rendered as the rule lines NCCL's example tuner plugin reads (`gcpgpu nccl tuner`).

Split out of gcpgpu.nccl, which re-exports these names; like it, imports nothing heavy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gcpgpu.errors import UsageProblem

# NCCL's example tuner plugin (ext-tuner/example) reads one rule a line:
#   collective,minBytes,maxBytes,algorithm,protocol,channels
# and matches minBytes <= nBytes <= maxBytes, both ends inclusive; channels -1 keeps NCCL's choice.
COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
TUNER_ALGOS = {
    "tree": ("allreduce",),
    "ring": COLLECTIVES,
    "collnet_direct": ("allreduce", "allgather", "reducescatter"),
    "collnet_chain": ("allreduce",),
    "nvls": ("allreduce", "allgather", "reducescatter"),
    "nvls_tree": ("allreduce",),
    "pat": ("allgather", "reducescatter"),
}
TUNER_PROTOS = ("ll", "ll128", "simple")
MAX_BYTES = 2**64 - 1  # "no upper bound": NCCL reads maxBytes as an unsigned 64-bit number

# The declarative table: per collective, [from, to) byte ranges (to=None: no upper bound) and
# what to use there. Ranges of one collective must start at 0 and follow on without gap or
# overlap. These defaults are a starting point to measure against (small messages favour latency,
# large ones bandwidth), not values measured on Google's machines.
DEFAULT_TUNER_TABLE: tuple[Mapping[str, Any], ...] = (
    {"collective": "allreduce", "from": "0", "to": "64KiB", "algorithm": "tree", "protocol": "ll"},
    {"collective": "allreduce", "from": "64KiB", "to": "4MiB", "algorithm": "ring", "protocol": "ll128"},
    {"collective": "allreduce", "from": "4MiB", "to": None, "algorithm": "ring", "protocol": "simple"},
    {"collective": "allgather", "from": "0", "to": "64KiB", "algorithm": "ring", "protocol": "ll"},
    {"collective": "allgather", "from": "64KiB", "to": "4MiB", "algorithm": "ring", "protocol": "ll128"},
    {"collective": "allgather", "from": "4MiB", "to": None, "algorithm": "ring", "protocol": "simple"},
    {"collective": "reducescatter", "from": "0", "to": "64KiB", "algorithm": "ring", "protocol": "ll"},
    {"collective": "reducescatter", "from": "64KiB", "to": "4MiB", "algorithm": "ring", "protocol": "ll128"},
    {"collective": "reducescatter", "from": "4MiB", "to": None, "algorithm": "ring", "protocol": "simple"},
)

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(value: Any, where: str) -> int:
    """Bytes from 4096, '64KiB', '4MiB', '1G' (binary units: a message size is counted in KiB)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise UsageProblem(f"{where}: {value!r} is not a byte size like 65536, 64KiB or 4MiB")
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * _UNITS[unit]


@dataclass(frozen=True)
class TunerRule:
    collective: str
    min_bytes: int  # inclusive
    max_bytes: int  # inclusive
    algorithm: str
    protocol: str
    channels: int = -1

    def csv(self) -> str:
        return ",".join(
            str(v)
            for v in (self.collective, self.min_bytes, self.max_bytes, self.algorithm, self.protocol, self.channels)
        )


def tuner_rules(table: Iterable[Mapping[str, Any]] = DEFAULT_TUNER_TABLE) -> list[TunerRule]:
    """Validate a declarative table and turn it into rules; one-line UsageProblem on the first fault."""
    rules: list[TunerRule] = []
    for i, row in enumerate(table):
        where = f"tuner table row {i + 1}"
        if not isinstance(row, Mapping):
            raise UsageProblem(f"{where}: expected a mapping with collective, from, to, algorithm, protocol")
        unknown = set(row) - {"collective", "from", "to", "algorithm", "protocol", "channels"}
        if unknown:
            raise UsageProblem(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        collective = str(row.get("collective", "")).lower()
        if collective not in COLLECTIVES:
            raise UsageProblem(f"{where}: collective {row.get('collective')!r} is not one of {', '.join(COLLECTIVES)}")
        algorithm = str(row.get("algorithm", "")).lower()
        if algorithm not in TUNER_ALGOS:
            raise UsageProblem(f"{where}: algorithm {row.get('algorithm')!r} is not one of {', '.join(TUNER_ALGOS)}")
        if collective not in TUNER_ALGOS[algorithm]:
            raise UsageProblem(
                f"{where}: NCCL has no {algorithm} algorithm for {collective} "
                f"(it has {algorithm} for {', '.join(TUNER_ALGOS[algorithm])})"
            )
        protocol = str(row.get("protocol", "")).lower()
        if protocol not in TUNER_PROTOS:
            raise UsageProblem(f"{where}: protocol {row.get('protocol')!r} is not one of {', '.join(TUNER_PROTOS)}")
        low = parse_size(row.get("from", 0), where)
        high = MAX_BYTES + 1 if row.get("to") in (None, "max") else parse_size(row["to"], where)
        if high <= low:
            raise UsageProblem(f"{where}: the range {low}..{high} bytes is empty ('to' must exceed 'from')")
        channels = row.get("channels", -1)
        if not isinstance(channels, int) or isinstance(channels, bool) or not (channels == -1 or 1 <= channels <= 64):
            raise UsageProblem(f"{where}: channels {channels!r} is not -1 (NCCL's choice) or 1..64")
        rules.append(TunerRule(collective, low, high - 1, algorithm, protocol, channels))
    if not rules:
        raise UsageProblem("tuner table: no rows")
    _check_coverage(rules)
    return rules


def _check_coverage(rules: list[TunerRule]) -> None:
    """Each collective's ranges start at 0 and follow on to the top without gap or overlap."""
    by_collective: dict[str, list[TunerRule]] = {}
    for rule in rules:
        by_collective.setdefault(rule.collective, []).append(rule)
    for collective, group in by_collective.items():
        group.sort(key=lambda r: (r.min_bytes, r.max_bytes))
        if group[0].min_bytes != 0:
            raise UsageProblem(f"tuner table: {collective} leaves 0..{group[0].min_bytes - 1} bytes uncovered")
        for before, after in zip(group, group[1:], strict=False):
            if after.min_bytes <= before.max_bytes:
                raise UsageProblem(
                    f"tuner table: {collective} ranges {_span(before)} and {_span(after)} overlap"
                )
            if after.min_bytes > before.max_bytes + 1:
                raise UsageProblem(
                    f"tuner table: {collective} leaves {before.max_bytes + 1}..{after.min_bytes - 1} "
                    f"bytes uncovered between {_span(before)} and {_span(after)}"
                )
        if group[-1].max_bytes != MAX_BYTES:
            raise UsageProblem(
                f"tuner table: {collective} stops at {group[-1].max_bytes} bytes; end its last range with to: max"
            )


def _span(rule: TunerRule) -> str:
    top = "max" if rule.max_bytes == MAX_BYTES else str(rule.max_bytes)
    return f"{rule.min_bytes}..{top}"


def tuner_config(table: Iterable[Mapping[str, Any]] = DEFAULT_TUNER_TABLE) -> str:
    """The tuner plugin's CSV config for a validated table, with a header saying how it is read."""
    rules = tuner_rules(table)
    header = [
        "# NCCL tuner plugin config, written by `gcpgpu nccl tuner-config`.",
        "# collective,minBytes,maxBytes,algorithm,protocol,channels (bytes inclusive; channels -1 = NCCL's choice)",
        "# Point NCCL at it: NCCL_TUNER_PLUGIN=<tuner .so> NCCL_TUNER_CONFIG_FILE=<this file>",
    ]
    return "\n".join(header + [rule.csv() for rule in rules]) + "\n"
