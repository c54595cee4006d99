"""What the user asked for: new shared file systems (--filestore, --lustre, --hyperdisk-ml) and existing
ones to attach (--mount KIND:NAME:/PATH), checked before any request.

Each refusal is one line naming the flag (or spec-file key) and what would be right.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from gcpgpu.errors import UsageProblem
from gcpgpu.specfile import BUCKET, shown

from . import tiers

KINDS = ("filestore", "lustre", "hyperdisk-ml")
DEFAULT_PATH = {"filestore": "/shared", "lustre": "/scratch", "hyperdisk-ml": "/data"}
# Mount points the node image or a job's container already owns (jobs/usercode.py keeps a job's
# --mount gs:// off them too): a shared file system there would hide the system or the user's code.
# /mnt/localssd: the node's local SSDs, where the gcsfuse cache and $GCPGPU_CKPT_LOCAL_DIR live
# (trainer/ckpt_local.py): a share mounted over it would hide both.
RESERVED = ("/workdir", "/gcs", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev",
            "/tmp", "/boot", "/run", "/var", "/root", "/mnt/disks", "/mnt/localssd", "/opt/gcpgpu")
# A size: a number, a unit. GiB/TiB (and G/T) are binary; GB/TB are decimal (10^9, 10^12 bytes). The number is
# read exactly (Decimal), so 400 nines is a size out of range, not an overflow.
SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(gib|g|gb|tib|t|tb)?\s*", re.IGNORECASE)
GB_IN_GIB = Decimal(10**9) / Decimal(2**30)
# Nothing gcpgpu sizes is larger: Managed Lustre's largest instance is 84,016,000 GiB (tiers.py), about 80 PiB.
MOST_GIB = 100 * 2**20
_ID = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
FULL_NAME = re.compile(rf"^projects/[a-z][-a-z0-9]{{4,28}}[a-z0-9]/locations/[a-z]+-[a-z]+[0-9]+(?:-[a-z])?/instances/{_ID}$")
SHORT_NAME = re.compile(rf"^{_ID}$")
GS_SOURCE = re.compile(r"gs://([^/]+)/(.+)")
# What a prefix may not hold: control characters (a newline ends the loader's line) and the characters a shell
# reads inside a double-quoted word or a quote ($ ` " ' \); Cloud Storage allows them, the loader VM's script
# quotes the prefix anyway (hyperdisk.loader_script), and no data set needs them.
UNSAFE_PREFIX = re.compile(r"[\x00-\x1f\x7f$`\"'\\]")


@dataclass(frozen=True)
class Want:
    """One shared file system of the cluster: new (size_gib set) or attached (existing set)."""

    kind: str
    path: str
    size_gib: int | None = None
    tier: str | None = None
    existing: str | None = None  # NAME or projects/P/locations/L/instances/N: attached, never deleted
    source: str | None = None  # hyperdisk-ml: gs://BUCKET/PREFIX

    @property
    def created(self) -> bool:
        return self.existing is None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _amount(value: Any, where: str, example: str) -> tuple[Decimal, str]:
    """(number, unit) of a size as the user wrote it; a one-line refusal for anything else."""
    bad = f"{where} {shown(value)} is not a size; write e.g. {example}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageProblem(bad)
    if isinstance(value, int):
        return Decimal(value), "gib"
    m = SIZE.fullmatch(value) if len(value) <= 1000 else None
    if not m:
        raise UsageProblem(bad)
    return Decimal(m.group(1)), (m.group(2) or "gib").lower()


def parse_size(value: Any, where: str) -> int:
    """A file system's size as whole GiB: 2560, "2560GiB", "2.5TiB", "10T" (binary units: Filestore and Lustre
    size in GiB). GB and TB (decimal) are refused with the binary figure to write: gcloud reads "1TB" as 1 TiB,
    the SI unit is 10^12 bytes, and a size that means one thing to each is not taken."""
    number, unit = _amount(value, where, "1TiB, 2560GiB or 2.5TiB")
    if unit in ("gb", "tb"):
        gib = number * GB_IN_GIB * (1000 if unit == "tb" else 1)
        raise UsageProblem(f"{where} {shown(value)}: {unit.upper()} is {'10^12' if unit == 'tb' else '10^9'} bytes "
                           f"({gib:,.1f} GiB); file system sizes are binary: write GiB or TiB, e.g. "
                           f"{number:f}{'TiB' if unit == 'tb' else 'GiB'}")
    gib = number * (tiers.TIB if unit.startswith("t") else 1)
    if gib > MOST_GIB:
        raise UsageProblem(f"{where} {shown(value)} is larger than any file system gcpgpu makes: give at most "
                           f"{MOST_GIB:,} GiB")
    if gib != gib.to_integral_value():
        raise UsageProblem(f"{where} {shown(value)} is not a whole number of GiB")
    return int(gib)


def parse_gib(value: Any, where: str, positive: bool = False) -> float:
    """An amount of data in GiB, for `plan storage`: GiB/TiB (and G/T) binary, GB/TB decimal (10^9, 10^12
    bytes); at most MOST_GIB and at least 0 (more than 0 when `positive`), else a one-line refusal naming the range."""
    number, unit = _amount(value, where, f"120GiB, 1.5TiB or 200GB, up to {MOST_GIB:,} GiB")
    gib = number * {"gib": 1, "g": 1, "tib": tiers.TIB, "t": tiers.TIB, "gb": GB_IN_GIB, "tb": GB_IN_GIB * 1000}[unit]
    if gib > MOST_GIB or (positive and gib <= 0):
        low = "more than 0 GiB" if positive else "0 GiB"
        raise UsageProblem(f"{where} {shown(value)} is out of range: give {low} up to {MOST_GIB:,} GiB (100 PiB)")
    return float(gib)


def check_path(path: Any, where: str) -> str:
    """An absolute mount point outside the reserved ones, normalised."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise UsageProblem(f"{where} {shown(path)}: the mount point must be an absolute path, e.g. /shared")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts) or re.search(r"[\x00-\x20\x7f:,'\"\\$`]", path):
        raise UsageProblem(f"{where} {shown(path)}: the mount point must not hold '.', '..', spaces, quotes or "
                           "control characters")
    norm = "/" + "/".join(parts)
    if norm == "/" or any(norm == r or norm.startswith(r + "/") or r.startswith(norm + "/") for r in RESERVED):
        raise UsageProblem(f"{where} {shown(path)}: {norm} is reserved (/, {', '.join(RESERVED)}, above or below "
                           "them); choose another mount point, e.g. /shared or /scratch")
    return norm


def parse_mount(value: Any, where: str = "--mount") -> Want:
    """--mount filestore:NAME:/PATH or lustre:NAME:/PATH: an existing instance, attached and never deleted."""
    example = "e.g. --mount filestore:my-share:/shared or --mount lustre:my-lustre:/scratch"
    parts = str(value).split(":") if isinstance(value, str) else []
    if len(parts) != 3 or parts[0] not in ("filestore", "lustre"):
        raise UsageProblem(f"{where} {shown(value)} must be filestore:NAME:/PATH or lustre:NAME:/PATH, {example}")
    kind, name, path = parts
    if not (SHORT_NAME.match(name) or FULL_NAME.match(name)):
        raise UsageProblem(f"{where} {shown(value)}: {shown(name)} must be an instance name (lowercase letters, digits "
                           "and -, starting with a letter) or projects/PROJECT/locations/LOCATION/instances/NAME")
    return Want(kind, check_path(path, where), existing=name)


def wanted(spec: Any) -> list[Want]:
    """Every shared file system a ClusterSpec asks for, checked (tiers, sizes, mount points; zones apart)."""
    out: list[Want] = []
    for kind, key, tier_key in (("filestore", "filestore", "filestore_tier"), ("lustre", "lustre", "lustre_tier")):
        size, tier_name = getattr(spec, key), getattr(spec, tier_key)
        if size is None:
            if tier_name is not None:
                raise UsageProblem(f"--{kind}-tier needs --{kind} SIZE (e.g. --{kind} "
                                   f"{'1TiB' if kind == 'filestore' else '18000GiB'})")
            continue
        out.append(_new(kind, size, tier_name))
    if spec.hyperdisk_ml is not None:
        out.append(_hyperdisk_ml(spec.hyperdisk_ml))
    mounts = spec.mounts if isinstance(spec.mounts, (list, tuple)) else [spec.mounts]
    out += [parse_mount(m) for m in mounts]
    seen: dict[str, Want] = {}
    for w in out:
        if w.path in seen:
            raise UsageProblem(f"mount point {w.path} is given twice ({seen[w.path].kind} and {w.kind}): give each "
                               "shared file system its own, e.g. --mount lustre:NAME:/scratch")
        seen[w.path] = w
    return out


def _new(kind: str, size: Any, tier_name: Any) -> Want:
    gib = parse_size(size, f"--{kind}")
    table = tiers.FILESTORE if kind == "filestore" else tiers.LUSTRE
    name = str(tier_name if tier_name is not None else
               tiers.FILESTORE_DEFAULT if kind == "filestore" else tiers.LUSTRE_DEFAULT)
    tier = tiers.tier(kind, name)
    if tier is None:
        unit = " (MB/s per TiB)" if kind == "lustre" else ""
        raise UsageProblem(f"--{kind}-tier {shown(tier_name)} must be one of {', '.join(table)}{unit}")
    if not tier.holds(gib):
        raise UsageProblem(f"--{kind} {gib:,} GiB is outside the {kind} {tier.name} tier: give {tier.rule()}")
    return Want(kind, DEFAULT_PATH[kind], size_gib=gib, tier=tier.name)


def _hyperdisk_ml(source: Any) -> Want:
    m = GS_SOURCE.fullmatch(source) if isinstance(source, str) else None
    if not m or not BUCKET.match(m.group(1)) or any(p in ("", ".", "..") for p in m.group(2).rstrip("/").split("/")):
        raise UsageProblem(f"--hyperdisk-ml {shown(source)} must be a bucket path gs://BUCKET/PREFIX (the data "
                           "copied onto the disk), e.g. gs://my-bucket/datasets/c4")
    if UNSAFE_PREFIX.search(source):
        raise UsageProblem(f"--hyperdisk-ml {shown(source)}: the prefix must not hold control characters, quotes, "
                           "$, ` or \\; give a prefix of letters, digits and / . _ - (e.g. gs://my-bucket/datasets/c4)")
    return Want("hyperdisk-ml", DEFAULT_PATH["hyperdisk-ml"], source=source)


def check_removals(remove: Any, unmount: Any, wants: list[Want]) -> tuple[list[str], list[str]]:
    """--no-filestore/--no-lustre/--no-hyperdisk-ml (spec key `remove`: kinds) and --unmount PATH (`unmount`),
    checked against what the same run asks for; normalised."""
    remove = list(remove) if isinstance(remove, (list, tuple)) else [remove]
    unmount = list(unmount) if isinstance(unmount, (list, tuple)) else [unmount]
    for kind in remove:
        if kind not in KINDS:
            raise UsageProblem(f"remove {shown(kind)} must be one of {', '.join(KINDS)} (--no-filestore, "
                               "--no-lustre, --no-hyperdisk-ml)")
        if any(w.kind == kind and w.created for w in wants):
            raise UsageProblem(f"--no-{kind} and --{kind} exclude each other: give one")
    paths = [check_path(p, "--unmount") for p in unmount]
    for w in wants:
        if w.path in paths and not w.created:
            raise UsageProblem(f"--unmount {w.path} and --mount {w.kind}:{w.existing}:{w.path} exclude each other")
    return sorted(set(remove)), paths


def check_zones(wants: list[Want], zones: list[str], region: str, explicit: bool) -> list[str]:
    """The candidate zones where every new zonal file system can be made (new ones follow the nodes).
    An explicit zone the service does not offer is refused; otherwise the candidates narrow to it."""
    keep = list(zones)
    for w in wants:
        if not w.created or w.kind == "hyperdisk-ml":
            continue
        offered = tiers.zones_offering(w.kind, region)
        if offered is None:
            continue
        bad = [z for z in keep if z not in offered]
        if bad and explicit:
            raise UsageProblem(f"--zone {bad[0]}: {w.kind} is not offered there; in {region} it is offered in "
                               f"{', '.join(offered) or 'no zone'}")
        keep = [z for z in keep if z in offered]
        if not keep:
            raise UsageProblem(f"--{w.kind}: no zone of {region} that offers the machine type offers {w.kind} "
                               f"({', '.join(offered) or 'none'}); pick another --region")
    return keep


def describe(spec: Any) -> list[str]:
    """The plan's lines for a spec's shared file systems (what `cluster plan` says before anything is made)."""
    out = []
    for w in wanted(spec):
        if w.kind == "hyperdisk-ml":
            out.append(f"hyperdisk-ml disk filled from {w.source} by a loader VM, read-only at {w.path} on every "
                       "node: made in the nodes' zone once they are placed, deleted by 'cluster down'")
        elif w.created:
            out.append(f"{w.kind} {w.size_gib:,} GiB ({w.tier}) at {w.path} on every node: made in the nodes' zone "
                       "once they are placed, deleted by 'cluster down'")
        else:
            out.append(f"{w.kind} {w.existing} attached at {w.path} on every node (never deleted)")
    out += [f"the cluster's {kind} (if it has one): unmounted from every node and deleted" for kind in spec.remove]
    out += [f"the file system attached at {path} (if any): unmounted from every node, not deleted"
            for path in spec.unmount]
    if not (spec.remove or spec.unmount):
        out.append("a re-run keeps every file system the cluster already has (--no-filestore, --no-lustre, "
                   "--no-hyperdisk-ml or --unmount PATH take one away)")
    return out
