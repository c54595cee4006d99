"""Every figure gcpgpu checks a shared file system against: one table per service, with its source.

Sizes are GiB throughout (Filestore's `capacity_gb` and Lustre's `capacity_gib` are both GiB:
Filestore's API says "GB" for what its tier pages give in GiB and TiB). A figure marked
"unverified" was not read on Google's own page; each is checked again by the real API's answer.
"""

from __future__ import annotations

from dataclasses import dataclass

TIB = 1024


@dataclass(frozen=True)
class Band:
    """One capacity range of a tier: [low, high] GiB, a multiple of `step` GiB (Lustre's page: "a multiple
    of the step size"; its upper bands start at the first multiple above the threshold)."""

    low: int
    high: int
    step: int

    def holds(self, gib: int) -> bool:
        return self.low <= gib <= self.high and gib % self.step == 0

    def describe(self) -> str:
        return f"{_size(self.low)} to {_size(self.high)} in steps of {_size(self.step)}"


@dataclass(frozen=True)
class Tier:
    service: str  # "filestore" | "lustre"
    name: str  # what the user writes and (Filestore) the API's Instance.Tier enum name
    bands: tuple[Band, ...]
    # What the tier promises per TiB provisioned, MiB/s (0: its performance does not scale per TiB, so
    # `plan storage` does not size it).
    read_per_tib: float
    write_per_tib: float
    source: str
    api_value: int | str | None = None  # Lustre: per_unit_storage_throughput

    def holds(self, gib: int) -> bool:
        return any(b.holds(gib) for b in self.bands)

    def rule(self) -> str:
        return " or ".join(b.describe() for b in self.bands)

    def read_rate(self, gib: int) -> float:
        """MiB/s the tier promises for reads at `gib` (the whole instance, not one client)."""
        return self.read_per_tib * gib / TIB

    def write_rate(self, gib: int) -> float:
        return self.write_per_tib * gib / TIB


def _size(gib: int) -> str:
    if gib % TIB == 0:
        return f"{gib // TIB} TiB"
    return f"{gib:,} GiB"


FILESTORE_ZONAL_PAGE = "Google's Filestore Zonal tier page (service-tiers-zonal), read 2026-11-28"
FILESTORE_REGIONAL_PAGE = "Google's Filestore Regional tier page (service-tiers-regional), read 2026-11-28"
# Filestore v1 Instance.Tier values gcpgpu creates. ZONAL is the default: Google points AI/ML training
# at it ("advanced AI/ML training"), it is zonal like the nodes, and it scales reads with capacity.
FILESTORE: dict[str, Tier] = {t.name: t for t in (
    # Lower range 1-9.75 TiB in 256 GiB units; higher 10-100 TiB in 2.5 TiB units. Read 260 MiB/s and
    # write 88 MiB/s per TiB (lower range; the higher range's 650/220 per 2.5 TiB is the same rate).
    Tier("filestore", "ZONAL", (Band(1 * TIB, 9984, 256), Band(10 * TIB, 100 * TIB, 2560)), 260, 88,
         FILESTORE_ZONAL_PAGE),
    # 100-10,239 GiB (the lower range's step: unverified, 1 GiB assumed) or 10-100 TiB in 2.5 TiB units
    # (unverified: taken as Zonal's). Performance is "configurable"; Zonal's per-TiB rates assumed (unverified).
    Tier("filestore", "REGIONAL", (Band(100, 10239, 1), Band(10 * TIB, 100 * TIB, 2560)), 260, 88,
         FILESTORE_REGIONAL_PAGE + "; steps and rates unverified"),
    # The API reference's enum text: "BASIC instances offer a maximum capacity of 63.9 TB". Minimums
    # 1 TiB (HDD) and 2.5 TiB (SSD) and 1 GiB steps: unverified (third-party pages). Their throughput
    # does not grow per TiB the way Zonal's does (unverified), so no per-TiB promise is claimed.
    Tier("filestore", "BASIC_HDD", (Band(1 * TIB, 65434, 1),), 0, 0,
         "Filestore v1 Instance.Tier reference (63.9 TB); minimum unverified"),
    Tier("filestore", "BASIC_SSD", (Band(2560, 65434, 1),), 0, 0,
         "Filestore v1 Instance.Tier reference (63.9 TB); minimum unverified"),
)}
FILESTORE_DEFAULT = "ZONAL"

LUSTRE_PAGE = "Google's Managed Lustre performance tiers page (performance-tiers), read 2026-11-28"
MB_IN_MIB = 1e6 / 2**20  # Lustre's tiers are MB/s (10^6 bytes) per TiB
# Managed Lustre's tiers by per_unit_storage_throughput (MB/s per TiB); each has its own minimum,
# maximum and step (two steps above a threshold). The Dynamic tier (25 MB/s per TiB aggregate) is not
# offered here: its API value was not found in the documentation (unverified).
LUSTRE: dict[str, Tier] = {t.name: t for t in (
    Tier("lustre", str(mb), bands, mb * MB_IN_MIB, mb * MB_IN_MIB, LUSTRE_PAGE, mb) for mb, bands in (
        (1000, (Band(9000, 1530000, 9000), Band(1584000, 10008000, 72000))),
        (500, (Band(18000, 3060000, 18000), Band(3168000, 20016000, 144000))),
        (250, (Band(36000, 6120000, 36000), Band(6336000, 40032000, 288000))),
        (125, (Band(72000, 12240000, 72000),)),
    )
)}
LUSTRE_DEFAULT = "1000"  # Google: "recommended for throughput-critical ... AI/ML training"

# Where each service takes instances, for the regions gcpgpu's catalog knows. None: not read in
# Google's list, so not checked here (the API's own answer decides).
# Managed Lustre: Google's "Supported regions and zones" (managed-lustre/docs/locations), read 2026-11-28.
LUSTRE_ZONES: dict[str, tuple[str, ...] | None] = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
    "asia-northeast1": ("asia-northeast1-b", "asia-northeast1-c"),
    "us-east4": None, "us-east5": None, "us-west1": None,  # unverified
}
# Filestore: no per-zone list was read (unverified); every zone the catalog knows is let through.
FILESTORE_ZONES: dict[str, tuple[str, ...] | None] = {}

# Hyperdisk ML (a Compute disk type): 4 GiB to 64 TiB, attached read-only to up to 2,500 VMs
# (Google's Hyperdisk ML page: unverified here; the emulator holds Compute's limits).
HYPERDISK_ML = Band(4, 64 * TIB, 1)
HYPERDISK_ML_MAX_READERS = 2500


def tier(service: str, name: str) -> Tier | None:
    return (FILESTORE if service == "filestore" else LUSTRE).get(str(name).upper().replace("-", "_"))


def zones_offering(service: str, region: str) -> tuple[str, ...] | None:
    """The zones of `region` where `service` creates instances; None where gcpgpu does not know."""
    return (LUSTRE_ZONES if service == "lustre" else FILESTORE_ZONES).get(region)
