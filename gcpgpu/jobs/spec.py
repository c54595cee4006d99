"""JobSpec: one training job, from flags and/or a YAML file, validated before any API call.

The same spec runs on Vertex AI (a CustomJob) or on a gcpgpu cluster's VMs (through instance
metadata and the node's job agent). Every refusal is one line naming the field as the user gave
it (a flag or a spec-file key) and what would be right.
"""

from __future__ import annotations

import contextlib
import io
import re
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gcpgpu import catalog, specfile, times
from gcpgpu.cluster.names import check_cluster_name
from gcpgpu.errors import UsageProblem
from gcpgpu.image.name import image_path
from gcpgpu.trainer.argv import runs_bundled_trainer, trainer_args

from . import policy, usercode

TARGETS = ("vertex", "cluster")
STRATEGIES = ("standard", "spot", "flex-start")
RESTARTS = ("default", "never", "on-worker-restart")
NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVATION_PATH = re.compile(r"^projects/([^/]+)/zones/([a-z]+-[a-z]+\d+-[a-z])/reservations/([a-z](?:[-a-z0-9]*[a-z0-9])?)$")
RESERVATION_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
# Cloud Storage bucket names: 3-63 characters (up to 222 with dots, each dot-separated part at
# most 63), lowercase letters, digits, dashes, underscores and dots, starting and ending with a
# letter or digit.
# A container image reference as Docker's reference grammar writes it: [HOST[:PORT]/]PATH[:TAG][@DIGEST].
# Separators inside a path component are one character class each, so no input backtracks badly.
IMAGE_REF = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::\d{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::\w[\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
MAX_IMAGE_REF = 512  # name (255) + tag (128) + digest: refused by length before the pattern runs
# Names that usually hold secrets: job environments are stored in plain text (instance metadata,
# the CustomJob), so these draw a warning pointing at Secret Manager.
SECRET_HINT = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
MAX_NODES = 512
PRIORITIES = ("high", "normal", "low")  # a Slurm cluster's partitions (gcpgpu/slurm/conf.py)
FLEX_MAX_WAIT = (60, 7 * 86400)
MAX_DURATION_S = 365 * 86400


def parse_duration(value: Any, where: str) -> int:
    """A job's duration (--timeout, --max-wait, --stall-timeout): times.py's grammar, 1s to a year;
    validate() narrows each."""
    return times.parse_duration(value, where, at_least=1, at_most=MAX_DURATION_S)


def parse_env(pairs: Any, where: str = "--env") -> dict[str, str]:
    """KEY=VALUE strings (or a mapping from a spec file) -> dict, refusing names a shell cannot take."""
    if isinstance(pairs, dict):
        items = [(str(k), "" if v is None else str(v)) for k, v in pairs.items()]
    elif pairs is not None and not isinstance(pairs, (list, tuple)):
        raise UsageProblem(f"{where} is {pairs!r}; it must be a mapping of NAME: value (or a list of NAME=VALUE)")
    else:
        items = []
        for pair in pairs or ():
            name, sep, value = str(pair).partition("=")
            if not sep:
                raise UsageProblem(f"{where} {pair!r} is not KEY=VALUE (e.g. {where} NCCL_DEBUG=INFO)")
            items.append((name, value))
    out: dict[str, str] = {}
    for name, value in items:
        if not ENV_NAME.match(name):
            raise UsageProblem(f"{where} {name!r} is not an environment variable name (letters, digits, _; "
                               "not starting with a digit)")
        usercode.check_env_name(name, where)
        out[name] = value
    return out


@dataclass
class JobSpec:
    """A training job as the user asked for it (flags over an optional YAML file)."""

    target: str | None = None  # vertex | cluster
    cluster: str | None = None
    name: str | None = None
    machine_type: str | None = None
    nodes: int | None = None
    image: str | None = None
    command: list[str] = field(default_factory=list)  # replaces the image's entrypoint when given
    args: list[str] = field(default_factory=list)  # the trainer's arguments (after --)
    strategy: str = "standard"
    max_wait: int | None = None  # seconds; flex-start: how long to wait for capacity
    reservation: str | None = None  # vertex: NAME, projects/P/zones/Z/reservations/NAME, or "any"
    env: dict[str, str] = field(default_factory=dict)
    profile: bool = False  # Nsight Systems around the trainer's --profile-steps
    interactive: bool = False  # vertex: enableWebAccess, an interactive shell per replica (job attach)
    output_dir: str | None = None  # vertex: base_output_directory (gs://); cluster: a gs:// or node path
    timeout: int | None = None  # seconds
    restart: str = "default"
    service_account: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # The user's own code and data (jobs/usercode.py): unpacked at /workdir, run before the command,
    # buckets at mount points, Secret Manager versions as environment variables where the job runs.
    workdir: str | None = None
    setup: str | None = None
    mounts: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    # What the job's follower does besides recovering lost nodes (jobs/policy.py).
    max_restarts_on_errors: int | None = None
    retry_on_exit_codes: list[int] = field(default_factory=list)
    stall_timeout: int | None = None  # seconds
    notify: list[str] = field(default_factory=list)
    max_spend: float | None = None  # USD: the follower stops the job (checkpoint first) at this cost
    priority: str | None = None  # a Slurm cluster's queue: high | normal | low (jobs/cluster/slurm.py)

    @classmethod
    def from_sources(cls, path: str | None, flags: dict[str, Any]) -> JobSpec:
        """A spec from a YAML file (if any) with the flags that were given (not None) on top; --env adds
        to the file's env."""
        values = _load_file(path) if path else {}
        if values.get("target") == "vertex" and values.get("cluster") and flags.get("target") is None:
            raise UsageProblem(f"-f {path}: the spec file names both vertex and cluster: keep one")
        for key, value in flags.items():
            if value is None or (isinstance(value, (list, tuple, dict)) and not value and key in values):
                continue
            values[key] = {**values[key], **value} if key == "env" and isinstance(values.get(key), dict) else value
        return cls(**values)


@dataclass(frozen=True)
class ValidJob:
    """A spec checked and completed: what the Vertex renderer and the cluster submitter consume.

    Frozen: nothing changes a job once it is checked. What later steps decide (the default image, the
    staged --workdir, the arguments fitted to the cluster's nodes) makes a new value (jobs/submit.py)."""

    spec: JobSpec
    target: str
    name: str
    machine: catalog.MachineType | None  # None for a cluster job that did not name one (the cluster's)
    nodes: int | None  # None for a cluster job that did not name one: all the cluster's nodes
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    region: str | None
    reservation: dict | None  # Vertex reservationAffinity, camelCase
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # defaults chosen for the target, said before submit
    workdir_uri: str | None = None  # gs:// of the staged --workdir tarball (jobs/workdir.py), decided before submit
    image_pending: bool = False  # no --image: `image` names the repository only until the submit path resolves it

    @property
    def bundled_trainer(self) -> bool:
        return runs_bundled_trainer(self.image, self.command)


def strategy_of(*, spot: bool, flex_start: bool) -> str | None:
    """The scheduling strategy --spot or --flex-start asks for (None: on-demand); both is one line."""
    if spot and flex_start:
        raise UsageProblem("--spot and --flex-start exclude each other: choose one scheduling strategy")
    return "spot" if spot else "flex-start" if flex_start else None


def validate(spec: JobSpec, *, project: str | None, region: str | None, zone: str | None) -> ValidJob:
    """Check everything that needs no API call; complete defaults (image, reservation name)."""
    warnings: list[str] = []
    target = spec.target
    usercode.check_setup(spec, target if target in TARGETS else None)
    if target not in TARGETS:
        raise UsageProblem("say where the job runs: --vertex (Vertex AI custom job) or --cluster NAME "
                           "(a gcpgpu cluster's VMs)")
    if target == "cluster":
        check_cluster_name(spec.cluster, "--cluster")
    elif spec.cluster:
        raise UsageProblem("--vertex and --cluster exclude each other: choose one target")
    if spec.priority is not None and spec.priority not in PRIORITIES:
        raise UsageProblem(f"--priority {spec.priority!r} must be one of {', '.join(PRIORITIES)}")
    if spec.priority is not None and target != "cluster":
        raise UsageProblem("--priority orders a Slurm cluster's queue: it needs --cluster NAME")
    name = spec.name or "train"
    if not NAME.match(name):
        raise UsageProblem(f"--name {name!r} must be lowercase letters, digits and dashes, starting with a letter, "
                           f"40 characters at most{specfile.lowercase_hint(name, NAME.match)}")

    machine = None
    if spec.machine_type:
        machine = catalog.get_machine_type(spec.machine_type)
    if target == "vertex":
        if machine is None:
            raise UsageProblem("--machine-type is required with --vertex, e.g. a3-highgpu-8g (see 'gcpgpu catalog')")
        if machine.vertex_accelerator is None:
            raise UsageProblem(f"--machine-type {machine.name} is not offered by Vertex AI training; use another "
                               "machine type (see 'gcpgpu catalog') or run it on a cluster with --cluster NAME")
    nodes = spec.nodes
    if nodes is None and target == "vertex":
        nodes = 1
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES):
        raise UsageProblem(f"--nodes {nodes!r} must be a whole number from 1 to {MAX_NODES}")

    if spec.strategy not in STRATEGIES:
        raise UsageProblem(f"strategy {spec.strategy!r} is not one of {', '.join(STRATEGIES)} "
                           "(flags: --spot, --flex-start)")
    if target == "cluster" and spec.strategy != "standard":
        raise UsageProblem(f"--{spec.strategy} applies to --vertex jobs; a cluster's VMs already have their "
                           "provisioning model (set it on 'gcpgpu cluster up')")
    if spec.max_wait is not None:
        if spec.strategy != "flex-start":
            raise UsageProblem("--max-wait applies only with --flex-start (how long to wait for capacity)")
        if not FLEX_MAX_WAIT[0] <= spec.max_wait <= FLEX_MAX_WAIT[1]:
            raise UsageProblem(f"--max-wait {spec.max_wait}s must be from 1m to 7d")
    if spec.restart not in RESTARTS:
        raise UsageProblem(f"--restart {spec.restart!r} is not one of {', '.join(RESTARTS)}")
    if target == "cluster" and spec.restart == "on-worker-restart":
        raise UsageProblem("--restart on-worker-restart applies to --vertex jobs; cluster jobs are not restarted "
                           "(resume from a checkpoint with the trainer's --resume)")
    if spec.timeout is not None and (not isinstance(spec.timeout, int) or spec.timeout < 1):
        raise UsageProblem(f"--timeout {spec.timeout!r} must be a positive duration, e.g. 12h")

    if target == "vertex" and not region:
        raise UsageProblem("no region set for the Vertex AI job: pass --region REGION, set "
                           "CLOUDSDK_COMPUTE_REGION, or run 'gcloud config set compute/region REGION'")
    reservation = _reservation(spec, target, project, region, zone)

    if spec.output_dir is not None:
        check_output_dir(str(spec.output_dir), target)
    if spec.service_account is not None:
        if target != "vertex":
            raise UsageProblem("--service-account applies to --vertex jobs; cluster jobs run as the nodes' "
                               "service account")
        specfile.check_service_account(spec.service_account, "--service-account")
    for key, value in spec.labels.items():
        if not re.match(r"^[a-z][a-z0-9_-]{0,62}$", str(key)) or not re.match(r"^[a-z0-9_-]{0,63}$", str(value)):
            raise UsageProblem(f"--label {specfile.shown(f'{key}={value}', quote=False)}: label keys and values are "
                               "lowercase letters, digits, _ and -, 63 characters at most (keys start with a letter)")

    command = [str(c) for c in spec.command or []]
    args = [str(a) for a in spec.args or []]
    # Vertex's request (protobuf) and instance metadata (JSON) carry UTF-8 only: a byte the shell
    # passed through undecoded would otherwise fail deep inside the client library.
    for what, values in (("--command", command), ("trainer argument", args)):
        for i, value in enumerate(values):
            specfile.check_utf8(value, f"{what} {i + 1}" if what != "--command" else what)
    image = spec.image
    if not image:
        if not project:
            raise UsageProblem("no project set for the default image: pass --project, or --image URI")
        image_region = region or "us-central1"
        # The gcpgpu training image (gcpgpu/image/name.py); which tag is decided at submit
        # (gcpgpu/image/default.py): the one last built, never :latest.
        image = image_path(project, image_region)
    elif len(image) > MAX_IMAGE_REF or not IMAGE_REF.match(image):
        raise UsageProblem(f"--image {specfile.shown(image)} is not a container image reference "
                           "[HOST/]PATH[:TAG][@sha256:DIGEST] with a lowercase path, e.g. "
                           "us-central1-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG")

    env = parse_env(spec.env, "--env")
    for key, value in env.items():
        specfile.check_utf8(value, f"--env {key}")
    for key in env:
        if SECRET_HINT.search(key):
            warnings.append(f"--env {key} looks like a secret: a job's environment is stored in plain text (the "
                            "CustomJob, instance metadata); read secrets from Secret Manager instead")
    usercode.check(spec, env)
    policy.check(spec, target)
    if env.get("NCCL_DEBUG") or any(k.startswith("NCCL_") for k in env):
        from gcpgpu import nccl

        for key, value in env.items():
            if key.startswith("NCCL_"):
                nccl.check_knob(key, value, f"--env {key}")

    valid = ValidJob(spec=spec, target=target, name=name, machine=machine, nodes=nodes, image=image,
                     command=command, args=args, env=env, region=region, reservation=reservation,
                     warnings=warnings, image_pending=not spec.image)
    fitted, notes = fit_trainer_args(valid, world=(nodes or 1) * (machine.gpu_count if machine else 1),
                                     exact=nodes is not None and machine is not None)
    return replace(valid, args=fitted, notes=notes) if notes else valid


def fit_trainer_args(job: ValidJob, *, world: int, exact: bool) -> tuple[list[str], list[str]]:
    """Check the bundled trainer's arguments for `world` GPU processes (nodes x GPUs per node, what the cloud
    runs); where the user gave no --batch-size and the trainer's default does not split over them, return
    job.args with one that does and the note that says so, else (job.args, []). Fitting the fitted arguments
    again for the same world adds nothing."""
    own = trainer_args(job.image, job.command, job.args)
    if own is None:
        return job.args, []
    fitted = check_trainer_args(own, world=world, exact=exact, output_dir=job.spec.output_dir)
    if fitted is None:
        return job.args, []
    batch, note = fitted
    return [*job.args, "--batch-size", str(batch)], [note]


def check_output_dir(value: str, target: str) -> None:
    """--output-dir: gs://BUCKET[/PATH] (either target) or, for cluster jobs, an absolute node path; in
    both, no '.', '..' or empty segment (a path that climbs out of its bucket or folder)."""
    shown = specfile.shown(value)
    if value.startswith("gs://"):
        bucket, _, path = value[len("gs://"):].partition("/")
        if not specfile.BUCKET.match(bucket):
            raise UsageProblem(f"--output-dir {shown}: {specfile.shown(bucket)} is not a bucket name (3-63 "
                               "lowercase letters, digits, -, _ and ., starting and ending with a letter or digit)")
        _check_segments(path, shown, "gs://BUCKET/runs/exp1")
        if len(path.encode("utf-8")) > 1000 or re.search(r"[\x00-\x1f\x7f]", path):
            raise UsageProblem(f"--output-dir {shown}: an object path is at most 1000 bytes, without control "
                               "characters")
        return
    if target == "vertex":
        raise UsageProblem(f"--output-dir {shown} must be a Cloud Storage folder for Vertex AI, "
                           "e.g. gs://BUCKET/runs/exp1")
    if not value.startswith("/"):
        raise UsageProblem(f"--output-dir {shown} must be gs://BUCKET/PATH or an absolute path on "
                           "the nodes (e.g. a shared filesystem)")
    if re.search(r"[:,\s\x00-\x1f\x7f]", value) or value.rstrip("/") in ("", "/gcs"):
        # Docker's --volume splits on ':' (and ',' in --mount); / and /gcs would hide the node's own files.
        raise UsageProblem(f"--output-dir {shown}: a node path without ':', ',' or spaces, below / "
                           "and outside /gcs (e.g. /mnt/shared/runs/exp1)")
    _check_segments(value[1:], shown, "/mnt/shared/runs/exp1")


def _check_segments(path: str, shown: str, example: str) -> None:
    # A trailing '/' names the same folder; any other empty, '.' or '..' segment is refused rather
    # than resolved: on a node '..' climbs out of the bucket's mount into the container's own disk.
    segments = path[:-1].split("/") if path.endswith("/") else path.split("/")
    if path and any(seg in ("", ".", "..") for seg in segments):
        raise UsageProblem(f"--output-dir {shown}: no '.', '..' or empty ('//') path segments; "
                           f"write the folder out, e.g. {example}")


def _reservation(spec: JobSpec, target: str, project: str | None, region: str | None,
                 zone: str | None) -> dict | None:
    value = spec.reservation
    if value is None:
        return None
    if target == "cluster":
        raise UsageProblem("--reservation applies to --vertex jobs; a cluster's nodes already hold their capacity "
                           "(give it to 'gcpgpu cluster up --reservation')")
    if spec.strategy != "standard":
        raise UsageProblem(f"--reservation cannot be used with --{spec.strategy}: reservations are consumed by "
                           "standard (on-demand) capacity only; drop one of them")
    if value == "any":
        return {"reservationAffinityType": "ANY_RESERVATION"}
    match = RESERVATION_PATH.match(value)
    if match:
        res_zone = match.group(2)
        full = value
    elif RESERVATION_NAME.match(value):
        if not zone:
            raise UsageProblem(f"--reservation {value}: say which zone holds it with --zone ZONE (a global option), "
                               "or give projects/PROJECT/zones/ZONE/reservations/NAME")
        if not project:
            raise UsageProblem(f"--reservation {value}: no project set; pass --project or the full reservation name")
        res_zone = zone
        full = f"projects/{project}/zones/{zone}/reservations/{value}"
    else:
        raise UsageProblem(f"--reservation {value!r} must be 'any', a reservation NAME (with --zone), or "
                           "projects/PROJECT/zones/ZONE/reservations/NAME")
    if region and not res_zone.startswith(region + "-"):
        raise UsageProblem(f"--reservation is in zone {res_zone}, outside the job's region {region}; pass "
                           f"--region {res_zone.rsplit('-', 1)[0]} or a reservation in {region}")
    return {"reservationAffinityType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
            "values": [full]}


def check_trainer_args(args: list[str], *, world: int, exact: bool,
                       output_dir: str | None = None) -> tuple[int, str] | None:
    """Refuse trainer arguments the trainer itself would refuse at start-up, before anything is submitted.

    Uses the trainer's own parser and checks (they import no torch). What only the remote machine
    can know (whether a --data or --config file exists there) is left to the trainer. When the user
    gave no --batch-size and the trainer's default does not split over `world` x --grad-accum, returns
    the global batch to use instead (the smallest such multiple at least the default) and a line
    saying so; else None.
    """
    try:
        from gcpgpu.trainer import config as tconfig
    except ImportError:  # a trimmed installation without the trainer: it will check its own arguments
        return None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = vars(tconfig.build_parser().parse_args(args))
    except SystemExit:
        line = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "invalid trainer arguments"
        raise UsageProblem(f"trainer arguments: {line.removeprefix('gcpgpu.trainer: error: ')}") from None
    if ns.get("config"):
        return None  # the options live in a file on the job's machines
    names = {f.name for f in fields(tconfig.TrainConfig)}
    values = {k: v for k, v in ns.items() if k in names}
    values["data"] = "synthetic"  # the data file lives where the job runs, not here
    if values.get("ckpt_dir") is None and output_dir:
        values["ckpt_dir"] = output_dir.rstrip("/") + "/checkpoints/"  # AIP_CHECKPOINT_DIR, the trainer's default
    try:
        cfg = tconfig.TrainConfig(**values)
        tconfig.check(cfg)
    except tconfig.ConfigError as e:
        raise UsageProblem(f"trainer arguments: {e}") from None
    except TypeError:
        return None
    if exact and world > 1 and cfg.parallel == "none":
        raise UsageProblem(f"trainer arguments: --parallel none runs one process but the job launches {world} "
                           "(nodes x GPUs); drop --parallel (auto picks ddp) or use ddp or fsdp")
    unit = world * cfg.grad_accum
    if cfg.batch_size == "auto" or cfg.micro_batch is not None:
        return None  # sized by the trainer from the memory plan and the ranks it finds
    if not exact or cfg.batch_size % unit == 0:
        return None
    over = f"{world} GPU processes" + (f" x --grad-accum {cfg.grad_accum}" if cfg.grad_accum > 1 else "")
    above = -(-cfg.batch_size // unit) * unit
    if "batch_size" not in ns:  # the trainer's default, not the user's choice: fit it to the target
        return above, (f"trainer --batch-size {above} (the global batch): the default {cfg.batch_size} does not "
                       f"split over the job's {over}; pass --batch-size to choose another multiple of {unit}")
    below = cfg.batch_size // unit * unit
    nearest = f"{below} or {above}" if below else f"{above}"
    raise UsageProblem(f"trainer arguments: --batch-size {cfg.batch_size} does not split over {over}; "
                       f"use a multiple of {unit} (nearest: {nearest})")


def _load_file(path: str) -> dict[str, Any]:
    """A spec file's keys: the JobSpec fields (dashes or underscores both accepted); spot, flex_start, vertex: switches."""

    def strategy(name: str) -> specfile.Alias:
        def switch(value: Any, where: str, out: dict[str, Any]) -> None:
            if value:
                if out.get("strategy") not in (None, name):
                    raise UsageProblem(f"-f {path}: spot and flex_start exclude each other")
                out["strategy"] = name

        return switch

    def vertex(value: Any, where: str, out: dict[str, Any]) -> None:
        if value:
            out["target"] = "vertex"

    aliases = {"spot": strategy("spot"), "flex_start": strategy("flex-start"), "vertex": vertex}
    return specfile.load_spec_file(path, "job", {f.name for f in fields(JobSpec)}, aliases, _file_value,
                                   types=typing.get_type_hints(JobSpec))


def _file_value(k: str, value: Any, where: str, out: dict[str, Any]) -> Any:
    """A JobSpec field's value from a spec file, checked and converted."""
    if k == "cluster" and value:
        out["target"] = "cluster"
    if k in ("max_wait", "timeout", "stall_timeout") and value is not None:
        value = parse_duration(value, where)
    if k in ("command", "args"):
        if isinstance(value, str):
            value = usercode.command_words(value, where) if k == "command" else usercode.split_command(value, where)
        if not isinstance(value, list):
            raise UsageProblem(f"{where} must be a list of strings (or one string, split like a shell would)")
        value = [str(v) for v in value]
    if k == "env":
        value = parse_env(value, where)
    if k in ("mounts", "notify") and isinstance(value, str):
        value = [value]
    if k in ("retry_on_exit_codes", "max_spend") and value is not None:
        value = policy.parse_exit_codes(value, where) if k == "retry_on_exit_codes" else specfile.parse_usd(value, where)
    if k == "secrets" and value is not None:
        value = usercode.parse_secrets(value, where)
    if k == "labels" and not isinstance(value, dict):
        raise UsageProblem(f"{where} must be a mapping of label keys to values")
    if k == "nodes" and not (isinstance(value, int) and not isinstance(value, bool)):
        raise UsageProblem(f"{where} {value!r} must be a whole number")
    if isinstance(value, str) and not value.strip():
        raise UsageProblem(f"{where} is empty: give a value or leave the key out")
    return value


def job_env(job: ValidJob, machine: catalog.MachineType | None, platform: str) -> dict[str, str]:
    """The job's environment: the machine's NCCL profile for `platform`, then gcpgpu's own, then the user's.

    The user's NCCL_* values win over the profile's (nccl.render_env checks them). Variables the
    profile prepends to (LD_LIBRARY_PATH) are left to the image's entrypoint, which prepends them
    to what the image has: a job-level value would replace the image's own.
    """
    env: dict[str, str] = {}
    if machine is not None:
        from gcpgpu import nccl

        user_nccl = {k: v for k, v in job.env.items() if k.startswith("NCCL_")}
        rendered = nccl.render_env(machine, platform, user_nccl, source="--env")
        env.update({k: v for k, v in rendered.env.items() if k not in rendered.prepend})
        env["GCPGPU_MACHINE_TYPE"] = machine.name
        env["GCPGPU_NCCL_USER"] = ",".join(sorted(user_nccl))  # the image's entrypoint sets the others afresh
    if job.spec.profile:
        env["GCPGPU_PROFILE"] = "1"
    out = job.spec.output_dir
    if out and job.target == "cluster":
        # The variables Vertex AI sets from base_output_directory, so one trainer finds its folders
        # either way (the trainer checkpoints to AIP_CHECKPOINT_DIR); the entrypoint copies nsys
        # reports to GCPGPU_OUTPUT_DIR.
        base = out.rstrip("/")
        env.update(AIP_MODEL_DIR=f"{base}/model/", AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
                   AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/", GCPGPU_OUTPUT_DIR=base)
    env.update(usercode.user_env(job.spec, job.workdir_uri))
    env.update(job.env)
    return env
