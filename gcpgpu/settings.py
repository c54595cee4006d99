"""Settings: the global options, with project/region/zone resolved only when a command asks.

Each of project, region and zone resolves in this order: the flag, then the environment, then
the active gcloud configuration, read from its properties file (no `gcloud` subprocess: it
costs a second and may not be installed). Commands that need none of them (`catalog`,
`emulator`, every `--help`) never touch the environment or the gcloud files.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gcpgpu.errors import UsageProblem

if TYPE_CHECKING:
    from gcpgpu.gcp.clients import Clients

FORMATS = ("table", "json", "yaml")

# Where each setting may come from, strongest first; a source's rank is its index here.
Source = Literal["flag", "env", "gcloud", "zone"]
_RANK = {"flag": 0, "env": 1, "gcloud": 2}

_ENV = {
    "project": ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"),
    "region": ("CLOUDSDK_COMPUTE_REGION",),
    "zone": ("CLOUDSDK_COMPUTE_ZONE",),
}
_GCLOUD_KEY = {"project": ("core", "project"), "region": ("compute", "region"), "zone": ("compute", "zone")}
_HOW_TO_SET = {
    "project": "pass --project, set GOOGLE_CLOUD_PROJECT, or run 'gcloud config set project PROJECT'",
    "region": "pass --region (or --zone), set CLOUDSDK_COMPUTE_REGION, "
    "or run 'gcloud config set compute/region REGION'",
    "zone": "pass --zone, set CLOUDSDK_COMPUTE_ZONE, or run 'gcloud config set compute/zone ZONE'",
}

# us-central1-a -> us-central1; anything else is not a zone we can derive a region from.
_ZONE_RE = re.compile(r"^(?P<region>[a-z]+(?:-[a-z]+)*\d+)-[a-z]$")
_HOST_PORT_RE = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")


# GCP project ids: 6-30 lowercase letters, digits and hyphens, starting with a letter, not ending
# with a hyphen ("Creating and managing projects", cloud.google.com/resource-manager/docs); old
# domain-scoped ids carry a "example.com:" prefix.
_PROJECT_ID_RE = re.compile(r"^(?:[a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_SOURCE_WORD = {"flag": "--project", "env": "the environment's project", "gcloud": "gcloud's core/project"}


def project_id_problem(value: str) -> str | None:
    """Why `value` cannot be a GCP project id, or None when it can be one."""
    if _PROJECT_ID_RE.match(value):
        return None
    bare = value.rsplit(":", 1)[-1]
    if not 6 <= len(bare) <= 30:
        return f"is {len(bare)} characters; project ids have 6 to 30"
    if not bare[0].isalpha() or not bare[0].islower():
        return "must start with a lowercase letter"
    if bare.endswith("-"):
        return "must not end with a hyphen"
    return "may hold only lowercase letters, digits and hyphens"


def region_of_zone(zone: str) -> str | None:
    """The region a zone lies in ('us-central1-a' -> 'us-central1'), or None if it isn't zone-shaped."""
    match = _ZONE_RE.match(zone)
    return match.group("region") if match else None


def parse_emulator(value: str | None) -> str | None:
    """Validate an --emulator address as HOST:PORT; returns it unchanged, or None when unset."""
    if value is None or value == "":
        return None
    match = _HOST_PORT_RE.match(value.strip())
    if not match or not 0 < int(match.group("port")) < 65536:
        raise UsageProblem(
            f"--emulator {value!r} is not HOST:PORT (e.g. 127.0.0.1:8085; also read from GCPGPU_EMULATOR)"
        )
    return value.strip()


def gcloud_config_dir(environ: Mapping[str, str]) -> Path:
    """gcloud's configuration folder: $CLOUDSDK_CONFIG or ~/.config/gcloud."""
    configured = environ.get("CLOUDSDK_CONFIG")
    return Path(configured).expanduser() if configured else Path("~/.config/gcloud").expanduser()


def active_gcloud_config(environ: Mapping[str, str]) -> tuple[str, Path]:
    """The active gcloud configuration's name and the path of its properties file."""
    config_dir = gcloud_config_dir(environ)
    name = environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME", "").strip()
    if not name:
        try:
            name = (config_dir / "active_config").read_text(encoding="utf-8").strip()
        except OSError:
            name = ""
    name = name or "default"
    return name, config_dir / "configurations" / f"config_{name}"


def read_gcloud_properties(environ: Mapping[str, str]) -> configparser.ConfigParser:
    """The active gcloud configuration's properties (empty when there is none or it is unreadable)."""
    # interpolation=None: gcloud writes values verbatim, and a '%' in one must not raise.
    parser = configparser.ConfigParser(interpolation=None)
    _, path = active_gcloud_config(environ)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        # gcloud itself would refuse such a file; treat it as absent rather than crash every command.
        return configparser.ConfigParser(interpolation=None)
    return parser


@dataclass
class Settings:
    """The global options of one gcpgpu invocation; stored as click's ctx.obj."""

    project_flag: str | None = None
    region_flag: str | None = None
    zone_flag: str | None = None
    format: str = "table"
    emulator: str | None = None
    verbose: bool = False
    # Read at resolution time, not construction time, so tests can monkeypatch os.environ.
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise UsageProblem(f"--format {self.format!r} is not one of {', '.join(FORMATS)}")
        self.emulator = parse_emulator(self.emulator)
        for name in ("project", "region", "zone"):
            value = getattr(self, f"{name}_flag")
            if value is not None and not value.strip():
                raise UsageProblem(f"--{name} is empty: give a {name}, or leave --{name} out")
        # Two flags that contradict each other are a typo worth stopping for; checked here
        # because it needs no environment or file.
        if self.region_flag and self.zone_flag:
            zone_region = region_of_zone(self.zone_flag)
            if zone_region and zone_region != self.region_flag:
                raise UsageProblem(
                    f"--zone {self.zone_flag} is not in --region {self.region_flag}; "
                    f"drop --region or pass --region {zone_region}"
                )

    def update(self, **changes: object) -> None:
        """Set global options given later on the command line (`gcpgpu cluster list --project p`).

        Checked as at construction; what was resolved from the earlier values is forgotten.
        """
        for name, value in changes.items():
            setattr(self, name, value)
        for cached in ("_resolved", "clients"):
            self.__dict__.pop(cached, None)
        self.__post_init__()

    @property
    def project(self) -> str:
        """The Google Cloud project ID; a UsageProblem saying how to set it, or why it can't be one."""
        value = self._required("project")
        problem = project_id_problem(value)
        if problem:
            raise UsageProblem(f"{_SOURCE_WORD[self.source('project') or 'flag']} {value!r} is not a project id: it "
                               f"{problem} (6-30 lowercase letters, digits and hyphens, starting with a letter)")
        return value

    @property
    def region(self) -> str:
        """The region, from its own sources or derived from the zone; UsageProblem when neither is set."""
        return self._required("region")

    @property
    def zone(self) -> str:
        """The zone; a UsageProblem saying how to set it when none is found."""
        return self._required("zone")

    def optional(self, name: str) -> str | None:
        """project, region or zone if one is set anywhere, else None (for commands that can do without)."""
        return self._resolved[name][0]

    def source(self, name: str) -> Source | None:
        """Where project, region or zone came from: 'flag', 'env', 'gcloud', 'zone' (derived), or None."""
        return self._resolved[name][1]

    @cached_property
    def clients(self) -> Clients:
        """The Google clients for this invocation, pointed at the emulator when --emulator is set."""
        # Imported here: Google's client libraries take seconds to import and most commands,
        # and every --help, must not pay for them.
        from gcpgpu.gcp.clients import Clients

        return Clients(emulator=self.emulator, project=self.project)

    def _required(self, name: str) -> str:
        value = self._resolved[name][0]
        if value is None:
            raise UsageProblem(f"no {name} set: {_HOW_TO_SET[name]}")
        return value

    @cached_property
    def _resolved(self) -> dict[str, tuple[str | None, Source | None]]:
        # Resolved together and once: region depends on where the zone came from.
        project = self._lookup("project")
        zone = self._lookup("zone")
        region = self._lookup("region")
        zone_region = region_of_zone(zone[0]) if zone[0] else None
        # A zone given more specifically than the region wins: `--zone europe-west4-b` with a
        # gcloud default region of us-central1 means europe-west4, not a mismatched pair.
        if zone_region and (region[1] is None or _RANK[zone[1]] < _RANK[region[1]]):
            region = (zone_region, "zone")
        return {"project": project, "region": region, "zone": zone}

    def _lookup(self, name: str) -> tuple[str | None, Source | None]:
        flag = getattr(self, f"{name}_flag")
        if flag:
            return flag, "flag"
        for var in _ENV[name]:
            value = self.environ.get(var, "").strip()
            if value:
                return value, "env"
        section, key = _GCLOUD_KEY[name]
        value = self._gcloud.get(section, key, fallback="").strip()
        if value:
            return value, "gcloud"
        return None, None

    @cached_property
    def _gcloud(self) -> configparser.ConfigParser:
        return read_gcloud_properties(self.environ)
