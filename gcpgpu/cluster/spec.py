"""ClusterSpec: what the user asked for, from flags and/or a YAML file, validated before any API call.

Every refusal is one line that names the field (as the user wrote it: a flag or a spec-file key)
and says what would be right.
"""

from __future__ import annotations

import re
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from gcpgpu import catalog
from gcpgpu.errors import UsageProblem
from gcpgpu.specfile import check_service_account, load_spec_file, shown
from gcpgpu.times import format_duration, parse_duration

from .names import RFC1035, check_cluster_name

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
FLEX_START_SECONDS = (600, 604800)  # Cluster Toolkit's bounds for maxRunDuration: 10 min .. 7 days
# scheduling.maxRunDuration per provisioning model. Flex-start: the bounds above. Standard and Spot
# VMs take any duration from 30 s to 120 days (Google's "Limit the run time of a VM": "the minimum
# time limit is 30 seconds and the maximum is 120 days"; legacy preemptible VMs cannot have one).
MAX_RUN_SECONDS = {"flex-start": FLEX_START_SECONDS, "standard": (30, 120 * 86400), "spot": (30, 120 * 86400)}
# Scheduling.instanceTerminationAction (Compute v1 discovery: DELETE | STOP; STOP is "default
# action"). gcpgpu's defaults: flex-start VMs are deleted (as before), standard and Spot VMs are
# stopped, so their boot disks stay and `cluster up` starts them again.
TERMINATION_ACTIONS = ("delete", "stop")
DEFAULT_TERMINATION = {"flex-start": "delete", "standard": "stop", "spot": "stop"}
# How long a flex-start request may wait for capacity (Instance.params.requestValidForDuration):
# 0 = only if capacity is there now, else 90 s .. 2 h (gcp-facts section 10; the API field doc
# gives no bounds: unverified beyond that record).
FLEX_WAIT_SECONDS = (90, 7200)
DEFAULT_FLEX_WAIT = 3600
FLEX_WAIT_RULE = "0 (only if capacity is there now) or between 90s and 2h"
RUN_RULE = "30s and 120d (Compute Engine's limits)"
# Each duration field's bounds as the flag or spec key is read; validate() holds the exact ones, which
# depend on other fields (the provisioning model's run duration, flex-wait's 0 or 90 s .. 2 h).
DURATION_BOUNDS = {
    "max_run_duration": (0, 365 * 86400, f"out of range: the run duration must be between {RUN_RULE}"),
    "flex_wait": (0, FLEX_WAIT_SECONDS[1], f"out of range: give {FLEX_WAIT_RULE}"),
}
PROVISIONING = ("standard", "spot", "flex-start")
SCHEDULERS = ("slurm",)
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# The boot image as Compute's sourceImage takes it: a full URL or a partial path to an image or an
# image family, in another project or (global/images/...) this one.
_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
IMAGE_PATH = re.compile(r"^(?:(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta)/)?"
                        rf"projects/(?:[a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{{4,28}}[a-z0-9]/)?global/images/(?:family/)?{_NAME}$")
SCOPE = re.compile(r"^https://www\.googleapis\.com/auth/[a-z][a-z0-9._-]{0,99}$")


@dataclass
class ClusterSpec:
    """A GPU cluster as the user wants it. `validate()` fills the derived fields (region, zones, placement)."""

    name: str
    machine_type: str
    nodes: int = 1
    region: str | None = None
    zones: list[str] = field(default_factory=list)
    provisioning: str = "standard"
    max_run_duration: int | None = None  # seconds: Compute ends the VMs then (flex-start: required)
    termination_action: str | None = None  # "delete" | "stop" at the end of max_run_duration (None: per model)
    autostop: int | None = None  # seconds idle before the cluster stops itself (cluster/autostop.py)
    autostop_down: bool = False  # ... or deletes itself
    autostop_notify: list[str] = field(default_factory=list)  # webhooks told AUTOSTOPPED (--notify)
    max_spend: float | None = None  # USD: the cluster's follower stops it at this cost so far (spend.py)
    # The image the nodes' follower runs from (gcpgpu's training image): `cluster up --autostop` puts
    # the one `container build` last pushed here, so a node a recovery re-creates from this spec gets it too.
    agent_image: str | None = None
    # The image jobs will run, pulled while the nodes boot (and by a node a recovery re-creates) so a job
    # starts without a cold pull: `cluster up` fills in gcpgpu's image; "none" turns it off (--prepull).
    prepull: str | None = None
    flex_wait: int | None = None  # seconds a flex-start request waits for capacity (default 1 h)
    reservation: str | None = None
    create_reservation: bool = False
    placement: str | None = None  # "compact" | "none"; None = compact when it applies
    gpus: int | None = None  # optional check: GPUs per node the user expects
    image: str | None = None  # None: the machine family's image (catalog `nodes`)
    boot_disk_gb: int = 200
    boot_disk_type: str | None = None  # None: the machine family's boot disk type (catalog `nodes`)
    service_account: str | None = None
    # Jobs' own account (README, "Where the security boundary is"): the nodes keep theirs from job containers.
    job_service_account: str | None = None
    scopes: list[str] = field(default_factory=lambda: list(DEFAULT_SCOPES))
    labels: dict[str, str] = field(default_factory=dict)
    network: str = "default"
    subnetwork: str | None = None
    external_ips: bool = False
    iap_ssh: bool = False  # a firewall rule letting IAP TCP forwarding reach port 22 (cluster ssh)
    cloud_nat: bool = True  # a Cloud Router + NAT on the primary network when nodes have no external IP
    # The seed guide's TCP settings (256 MiB buffers, backlog, window scaling) at boot, for the traffic that runs
    # over TCP (the host NICs; A2's collectives): the GPUDirect paths keep their profiles (--no-host-tuning).
    host_tuning: bool = True
    scheduler: str | None = None  # "slurm": the nodes run Slurm, and jobs queue on it (gcpgpu/slurm)
    # Shared file systems (gcpgpu/storage): new ones made with the cluster and deleted with it, and
    # existing ones attached by name (mounts: "filestore:NAME:/PATH", never deleted).
    filestore: int | str | None = None  # size (GiB, or "2.5TiB")
    filestore_tier: str | None = None
    lustre: int | str | None = None
    lustre_tier: int | str | None = None  # MB/s per TiB: 125, 250, 500, 1000
    hyperdisk_ml: str | None = None  # gs://BUCKET/PREFIX
    mounts: list[str] = field(default_factory=list)
    # What a re-run `up` takes away (it keeps every file system the cluster has unless told): the cluster's own
    # file systems to unmount and delete ("filestore", "lustre", "hyperdisk-ml"), attached ones to unmount (paths).
    remove: list[str] = field(default_factory=list)
    unmount: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # -------------------------------------------------------------------- construction
    @classmethod
    def from_sources(cls, file: str | None, flags: dict[str, Any]) -> ClusterSpec:
        """A spec file's values, overridden by the flags the user actually gave (None = not given)."""
        values: dict[str, Any] = {}
        if file:
            values.update(_load_file(file))
        values.update({k: v for k, v in flags.items() if v is not None and v != () and v != []})
        if "name" not in values:
            raise UsageProblem("NAME is missing: give the cluster a name (argument or 'name:' in the spec file)")
        if "machine_type" not in values:
            raise UsageProblem("--machine-type is missing: e.g. --machine-type a3-highgpu-8g (see 'gcpgpu catalog')")
        return cls(**values)

    # -------------------------------------------------------------------- validation
    def validate(self, default_region: str | None = None, default_zone: str | None = None) -> ClusterSpec:
        """Check everything against the catalog and the rules GCP enforces; no API calls."""
        check_cluster_name(self.name)
        mt = catalog.get_machine_type(self.machine_type)
        self.machine_type = mt.name
        if not isinstance(self.nodes, int) or self.nodes < 1:
            raise UsageProblem(f"--nodes {self.nodes!r} must be a whole number of at least 1")
        if self.gpus is not None and self.gpus != mt.gpu_count:
            siblings = [m.name for m in catalog.machine_types().values()
                        if m.gpu.name == mt.gpu.name and m.gpu_count == self.gpus]
            hint = f"; use {siblings[0]}" if siblings else ""
            raise UsageProblem(f"--gpus {self.gpus}: {mt.name} always has {mt.gpu_count} {mt.gpu.model} GPUs{hint}")

        if self.scheduler is not None and self.scheduler not in SCHEDULERS:
            raise UsageProblem(f"--scheduler {self.scheduler!r}: the one scheduler gcpgpu runs is "
                               f"{', '.join(SCHEDULERS)}; leave it out for one job at a time")
        self.provisioning = str(self.provisioning).lower().replace("_", "-")
        if self.provisioning not in PROVISIONING:
            raise UsageProblem(f"provisioning {self.provisioning!r} must be one of {', '.join(PROVISIONING)}")
        explicit_zones = bool(self.zones) or (not self.region and bool(default_zone))
        self._validate_location(mt, default_region, default_zone)
        self._validate_storage(explicit_zones)
        self._validate_provisioning(mt)
        self._validate_node(mt)
        self._validate_misc()
        return self

    def _validate_location(self, mt: catalog.MachineType, default_region: str | None, default_zone: str | None) -> None:
        zones = list(self.zones)
        if not zones and not self.region and default_zone:
            zones = [default_zone]
        region = self.region
        for z in zones:
            zr = catalog.region_of(z)
            if zr is None:
                raise UsageProblem(
                    f"--zone {z!r} is not a zone the catalog knows (as of {catalog.availability_as_of()}); "
                    "pick one from 'gcpgpu catalog zones' or add it to gcpgpu/data/machines.yaml"
                )
            if region and zr != region:
                raise UsageProblem(f"--zones {z!r} is in {zr}, not in --region {region}")
            region = zr
        region = region or default_region
        if not region:
            raise UsageProblem("--region is missing: pass --region R or --zone Z, set CLOUDSDK_COMPUTE_REGION, "
                               "or run 'gcloud config set compute/region R'")
        if region not in catalog.availability():
            raise UsageProblem(f"--region {region!r} is not a region the catalog knows; "
                               f"known: {', '.join(catalog.availability())}")
        offering = catalog.zones_offering(mt.name, region)
        if zones:
            for z in zones:
                if z not in offering:
                    where = ", ".join(offering) or "no zone of this region"
                    raise UsageProblem(
                        f"--zone {z}: {mt.name} ({mt.gpu.model}) is not offered there; in {region} it is offered in {where}"
                    )
        elif not offering:
            regions = [r for r in catalog.availability() if catalog.zones_offering(mt.name, r)]
            raise UsageProblem(f"--region {region}: no zone there offers {mt.name}; try {', '.join(regions) or 'another type'}")
        self.region = region
        self.zones = zones or offering
        if len(set(self.zones)) != len(self.zones):
            raise UsageProblem("--zones lists a zone twice")

    def _validate_storage(self, explicit_zones: bool) -> None:
        """Sizes, tiers and mount points in canonical form; the candidate zones narrowed to where every new
        zonal file system can follow the nodes (storage/spec.py)."""
        from gcpgpu.storage.spec import check_removals, check_zones, wanted

        wants = wanted(self)
        for w in wants:
            if w.created and w.kind in ("filestore", "lustre"):
                setattr(self, w.kind, w.size_gib)
                setattr(self, f"{w.kind}_tier", w.tier)
        self.mounts = [f"{w.kind}:{w.existing}:{w.path}" for w in wants if not w.created]
        self.remove, self.unmount = check_removals(self.remove, self.unmount, wants)
        self.zones = check_zones(wants, self.zones, str(self.region), explicit_zones)

    def _validate_provisioning(self, mt: catalog.MachineType) -> None:
        if self.reservation and self.create_reservation:
            raise UsageProblem("--reservation and --create-reservation exclude each other: consume one or create one")
        if self.reservation is not None:
            from .reservation_use import parse_target

            parse_target(self.reservation)
        if self.provisioning == "spot" and (self.reservation or self.create_reservation):
            raise UsageProblem("--spot can't consume a reservation: drop --spot or the reservation")
        if self.provisioning == "flex-start":
            if self.reservation or self.create_reservation:
                raise UsageProblem("--flex-start can't consume a reservation (it provisions with NO_RESERVATION)")
            if self.max_run_duration is None:
                raise UsageProblem("--flex-start needs a run duration, e.g. --flex-start 4h (10m to 7d)")
            if self.flex_wait is None:
                self.flex_wait = DEFAULT_FLEX_WAIT
            lo, hi = FLEX_WAIT_SECONDS
            if not isinstance(self.flex_wait, int) or not (self.flex_wait == 0 or lo <= self.flex_wait <= hi):
                raise UsageProblem(f"--flex-wait {self.flex_wait!r}s must be {FLEX_WAIT_RULE}")
        elif self.flex_wait is not None:
            raise UsageProblem("--flex-wait applies to flex-start nodes only: add --flex-start DURATION "
                               "(e.g. --flex-start 4h)")
        self._validate_run_duration()
        self._validate_autostop()
        if self.placement is None:
            # Compact by default wherever it applies: several nodes (flex-start VMs included: the AI
            # Hypercomputer guide creates them with compact placement).
            self.placement = "compact" if self.nodes > 1 else "none"
        if self.placement not in ("compact", "none"):
            raise UsageProblem(f"--placement {self.placement!r} must be compact or none")
        if self.placement == "compact" and self.nodes > mt.compact_max_vms:
            note = "" if mt.compact_max_vms_verified else " (catalog figure, unverified)"
            raise UsageProblem(f"--nodes {self.nodes}: a compact placement policy holds at most {mt.compact_max_vms} "
                               f"{mt.family} VMs{note}; use fewer nodes or --no-placement")

    def _validate_autostop(self) -> None:
        from gcpgpu.specfile import check_urls, parse_usd

        from .autostop import parse

        for key in ("agent_image", "prepull"):
            value = getattr(self, key)
            if value is not None and value != "none" and (
                    not isinstance(value, str) or len(value) > 300
                    or not re.fullmatch(r"[a-z0-9][\w.:/@-]*/[\w.:@-]+", value)):
                raise UsageProblem(f"{key} {shown(value)} must be a container image like "
                                   "REGION-docker.pkg.dev/PROJECT/gcpgpu/gcpgpu-trainer:TAG"
                                   + (" (or none)" if key == "prepull" else ""))
        self.autostop_notify = check_urls(self.autostop_notify)
        if self.max_spend is not None:
            self.max_spend = parse_usd(self.max_spend, "--max-spend")
            if self.scheduler:  # node 0's queue agent runs a Slurm cluster's jobs: no follower prices them
                raise UsageProblem("--max-spend applies to clusters without --scheduler: a Slurm cluster's jobs are "
                                   "not stopped at a cap yet")
        if self.autostop is not None:
            self.autostop = parse(self.autostop)
        elif self.autostop_notify and self.max_spend is None:
            raise UsageProblem("--notify needs --autostop DURATION or --max-spend USD (e.g. --autostop 30m --notify "
                               "URL): a cluster tells its webhooks when it stops itself (a job's own --notify is "
                               "job submit's)")
        elif self.autostop_down:
            raise UsageProblem("--down needs --autostop DURATION (e.g. --autostop 30m --down): it says what "
                               "autostop does")

    def _validate_run_duration(self) -> None:
        """The server-side cap: scheduling.maxRunDuration and instanceTerminationAction, per model."""
        flex = self.provisioning == "flex-start"
        flag = "--flex-start" if flex else "--max-run-duration"
        if self.termination_action is not None:
            action = str(self.termination_action).strip().lower()
            if action not in TERMINATION_ACTIONS:
                raise UsageProblem(f"--termination-action {shown(self.termination_action)} must be delete or stop "
                                   "(what Compute Engine does to the nodes when --max-run-duration ends)")
            # A reservation-bound node ends with its reservation: the action applies there too.
            if self.max_run_duration is None and not self.reservation:
                raise UsageProblem("--termination-action needs --max-run-duration DURATION (e.g. "
                                   "--max-run-duration 24h): it says what happens when that time is up")
            self.termination_action = action
        if self.max_run_duration is None:
            return
        seconds = self.max_run_duration
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise UsageProblem(f"{flag} {shown(seconds)} is not a duration; write e.g. 90m, 24h or 7d")
        lo, hi = MAX_RUN_SECONDS[self.provisioning]
        if not lo <= seconds <= hi:
            allowed = "10m and 7d for flex-start VMs" if flex else RUN_RULE
            raise UsageProblem(f"{flag} {format_duration(seconds)} is out of range: the run duration must be "
                               f"between {allowed}")
        self.termination_action = self.termination_action or DEFAULT_TERMINATION[self.provisioning]

    def _validate_node(self, mt: catalog.MachineType) -> None:
        """Fill the family's image and boot disk type; refuse a disk type the family cannot boot from."""
        setup = catalog.node_setup(mt)
        self.image = self.image or setup.image
        self.boot_disk_type = self.boot_disk_type or setup.boot_disk_type
        if self.boot_disk_type not in setup.boot_disk_types:
            raise UsageProblem(f"--boot-disk-type {self.boot_disk_type!r}: {mt.name} boots from "
                               f"{', '.join(setup.boot_disk_types)} (default {setup.boot_disk_type})")

    def _validate_misc(self) -> None:
        for key, value in self.labels.items():
            if not LABEL_KEY.match(str(key)) or key.startswith("gcpgpu-"):
                raise UsageProblem(f"--label {key!r}: keys are 1-63 of lowercase letters, digits, _ and -, starting with a "
                                   "letter (and gcpgpu- is reserved)")
            if not LABEL_VALUE.match(str(value)):
                raise UsageProblem(f"--label {key}={value!r}: values are up to 63 of lowercase letters, digits, _ and -")
        if len(self.labels) > 60:
            raise UsageProblem("--label: at most 60 labels (GCP allows 64 and gcpgpu uses 4)")
        if not isinstance(self.boot_disk_gb, int) or not 10 <= self.boot_disk_gb <= 65536:
            raise UsageProblem(f"--boot-disk-gb {self.boot_disk_gb!r} must be between 10 and 65536")
        # The plan writes projects/PROJECT/global/networks/NAME (and .../subnetworks/NAME) itself, so
        # these take the name alone; a path or anything else would reach Compute as a malformed URL.
        for what, value in (("--network", self.network), ("--subnetwork", self.subnetwork)):
            if value is not None and not (isinstance(value, str) and RFC1035.match(value)):
                raise UsageProblem(f"{what} {shown(value)} must be the name of a {what[2:]} in the project: 1-63 "
                                   "lowercase letters, digits and dashes, starting with a letter (e.g. default)")
        if self.service_account is not None:
            check_service_account(str(self.service_account), "--service-account")
        if self.job_service_account is not None:
            check_service_account(str(self.job_service_account), "--job-service-account")
            if self.job_service_account == self.service_account:
                raise UsageProblem("--job-service-account must not be the nodes' --service-account: jobs would hold "
                                   "the nodes' own identity (a Slurm cluster's munge key with it)")
        for scope in self.scopes:
            if not isinstance(scope, str) or not SCOPE.match(scope):
                raise UsageProblem(f"--scope {shown(scope)} must be an OAuth scope URL, e.g. "
                                   "https://www.googleapis.com/auth/cloud-platform")
        if not isinstance(self.image, str) or len(self.image) > 300 or not IMAGE_PATH.match(self.image):
            raise UsageProblem(f"--image {shown(self.image)} must be an image or image family path like "
                               "projects/PROJECT/global/images/family/FAMILY (or .../global/images/NAME)")


def duration(key: str, value: Any, where: str) -> int:
    """A duration field (max_run_duration, flex_wait, autostop) from a flag or a spec file, in seconds."""
    if key == "autostop":
        from .autostop import parse

        return parse(value, where)
    lo, hi, why = DURATION_BOUNDS[key]
    return parse_duration(value, where, at_least=lo, at_most=hi, too_long=why)


def _load_file(path: str) -> dict[str, Any]:
    """A spec file's keys: the ClusterSpec fields (dashes or underscores both accepted), and flex_start: DURATION."""

    def flex_start(value: Any, where: str, out: dict[str, Any]) -> None:
        out["provisioning"] = "flex-start"
        out["max_run_duration"] = duration("max_run_duration", value, f"{path}: flex_start")

    def convert(k: str, value: Any, where: str, out: dict[str, Any]) -> Any:
        if k in ("max_run_duration", "flex_wait", "autostop") and value is not None:
            return duration(k, value, f"{path}: {k}")
        if k == "autostop_notify" and isinstance(value, str):
            return [value]  # one webhook, as a job spec's notify
        if k == "mounts" and isinstance(value, str):
            return [value]
        if k in ("zones", "scopes") and isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]  # one string: comma-separated, like --zones
        if isinstance(value, str) and not value.strip():
            raise UsageProblem(f"{where} is empty: give a value or leave the key out")
        return value

    known = set(ClusterSpec.__dataclass_fields__)
    types = typing.get_type_hints(ClusterSpec)
    return load_spec_file(path, "cluster", known, {"flex_start": flex_start}, convert, types=types)
