"""`gcpgpu plan storage`: the file system tier and size a training run needs.

    read   = tokens/s x bytes/token                      (the data loader, all nodes together)
    write  = checkpoint size / target save time          (every rank writing its shard at once)
    space  = checkpoint size x checkpoints kept + data set size
    size   = the smallest capacity of the tier, on its step, with
             size x read promise per TiB >= read, size x write promise per TiB >= write, size >= space

Each tier's promise per TiB is tiers.py's (its source beside it). The recommendation is the tier that
needs the least capacity (what both services bill by); ties go to Filestore, whose NFS mount every
image has. A tier whose largest instance is too small is shown as not fitting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gcpgpu.errors import UsageProblem
from gcpgpu.specfile import shown

from . import tiers

MIB = 2**20
# What `plan storage` takes: each figure finite, in (low, high] (keep: a whole number in [low, high]). The tops
# are far above any training run (a trillion tokens/s; a GiB per token; ten thousand checkpoints kept) and keep
# every product below a float's range, so no figure can overflow the sizing.
TOKENS_PER_S = (0.0, 1e12)
BYTES_PER_TOKEN = (0.0, float(2**30))
KEEP = (1, 10_000)


def figure(value: Any, where: str, low: float, high: float) -> float:
    """A finite number in (low, high], or a one-line refusal naming `where` and the range."""
    try:
        number = float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and low < number <= high):
        raise UsageProblem(f"{where} {shown(value)} must be a number more than {low:g} and at most {high:g}")
    return number


def whole(value: Any, where: str, low: int, high: int) -> int:
    """A whole number in [low, high], or a one-line refusal naming `where` and the range."""
    text = str(value).strip()
    if not (text.isdigit() and len(text) <= len(str(high)) and low <= int(text) <= high):
        raise UsageProblem(f"{where} {shown(value)} must be a whole number from {low:,} to {high:,}")
    return int(text)


@dataclass(frozen=True)
class Need:
    read_mib_s: float
    write_mib_s: float
    space_gib: float


@dataclass(frozen=True)
class Option:
    tier: tiers.Tier
    size_gib: int | None  # None: no size of this tier is enough

    def row(self) -> dict:
        size = self.size_gib
        return {"service": self.tier.service, "tier": self.tier.name,
                "size_gib": size, "flag": self.flag(),
                "read_mib_s": round(self.tier.read_rate(size)) if size else None,
                "write_mib_s": round(self.tier.write_rate(size)) if size else None}

    def flag(self) -> str | None:
        if self.size_gib is None:
            return None
        if self.tier.service == "filestore":
            return f"--filestore {self.size_gib}GiB --filestore-tier {self.tier.name}"
        return f"--lustre {self.size_gib}GiB --lustre-tier {self.tier.name}"


def need(tokens_per_s: float, bytes_per_token: float, checkpoint_gib: float, save_s: float, keep: int = 2,
         data_gib: float = 0.0) -> Need:
    return Need(read_mib_s=tokens_per_s * bytes_per_token / MIB, write_mib_s=checkpoint_gib * 1024 / save_s,
                space_gib=checkpoint_gib * keep + data_gib)


def size_for(tier: tiers.Tier, n: Need) -> int | None:
    """The smallest valid capacity of `tier` that meets `n`, or None (also for a tier with no per-TiB promise)."""
    if not tier.read_per_tib or not tier.write_per_tib:
        return None
    want = max(n.space_gib, n.read_mib_s / tier.read_per_tib * tiers.TIB, n.write_mib_s / tier.write_per_tib * tiers.TIB)
    for band in tier.bands:
        size = max(band.low, math.ceil(want / band.step) * band.step)
        if size <= band.high:
            return size
    return None


def options(n: Need) -> list[Option]:
    """Every tier of both services, sized for `n`; the recommended one first, then by capacity."""
    found = [Option(t, size_for(t, n)) for t in (*tiers.FILESTORE.values(), *tiers.LUSTRE.values())]
    return sorted(found, key=lambda o: (o.size_gib is None, o.size_gib or 0, o.tier.service != "filestore"))
