"""What the training container works out before torchrun starts: machine, NCCL profile, rendezvous.

containers/entrypoint.sh runs `python -m gcpgpu.node.launch` and evals what it prints: `export` lines
for the NCCL profile of this machine and the torchrun rendezvous (GCPGPU_NNODES, GCPGPU_NODE_RANK,
GCPGPU_MASTER_ADDR, GCPGPU_MASTER_PORT, GCPGPU_NPROC_PER_NODE, and the same five under torchrun's own
names NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE for a user's launcher, whichever way
the rendezvous was found), then `cd` into the unpacked --workdir when the job has one. When the
machine needs a plugin, device or NIC that is not there, it prints one line saying what and exits 3
instead, so the job stops at once rather than training at a tenth of the speed or hanging in NCCL's
setup.

Inputs, strongest first (every one an environment variable, so a job spec can set it):
  machine type   GCPGPU_MACHINE_TYPE, then the metadata server's instance/machine-type
  platform       GCPGPU_PLATFORM (vm | container | vertex), then vertex when CLUSTER_SPEC or
                 CLOUD_ML_JOB_ID is set, container under Kubernetes, else vm
  NCCL flavour   GCPGPU_NCCL_FLAVOR (e.g. none to run over sockets), then the machine's own
  rendezvous     NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE (torchrun's names);
                 then Vertex AI's CLUSTER_SPEC; then the VM's metadata attributes gcpgpu-nnodes,
                 gcpgpu-node-rank, gcpgpu-master-addr, gcpgpu-master-port; then one node
  NCCL_* already set in the environment win over the profile. GCPGPU_NCCL_USER (job submit sets it)
                 names those that are the user's: the other NCCL_* came from gcpgpu's profile at submit and
                 are set again from this one (unset where it has none: GCPGPU_NCCL_FLAVOR=none drops TCPX's),
                 so the note lists only the user's as "yours kept"; without it every NCCL_* is the user's.
Test seams: GCPGPU_METADATA_URL (the metadata server's base URL), GCPGPU_SYSROOT (a folder
standing in for / when looking for plugins, devices and NICs). GCPGPU_SKIP_NCCL_CHECK=1 turns
refusals into warnings.

The trainer's numbers: `python -m gcpgpu.node.launch env -- ARGS` is given the container's arguments.
When they are trainer flags with `--log-json FILE` and this is node 0, the plan also sets the
shell array gcpgpu_reporter_args (not exported) to the arguments of gcpgpu.node.reporter, which
the entrypoint runs beside torchrun: --log-json FILE and --cluster NAME (GCPGPU_CLUSTER, then the
VM's metadata attribute gcpgpu-cluster) or --job ID (CLOUD_ML_JOB_ID, set by Vertex AI).
GCPGPU_METRICS=0 turns the reporter off.

Every node's NICs: on a node of a gcpgpu cluster (GCPGPU_CLUSTER, then the VM's metadata attribute
gcpgpu-cluster; not on Vertex AI) the plan sets gcpgpu_nics_args to the arguments of gcpgpu.node.nics,
which the entrypoint runs beside the job, trainer or command alike, so `metrics tail` shows each NIC's own
counters (GPU fabric apart from host). GCPGPU_METRICS=0 turns it off too.

NUMA: each rank's CPU threads and memory go on its GPU's NUMA node through torchrun's own
`--numa-binding node`, where this image's torch has it (read from torch's launcher source, not imported);
the plan sets gcpgpu_numa_args and says which way in the job's log. GCPGPU_NUMA_BINDING=0 (`job submit
--no-numa-binding`) leaves the ranks unbound.

The user's own code (gcpgpu.node.workspace documents the variables): `env` also unpacks GCPGPU_WORKDIR and
makes the GCPGPU_MOUNTS links, after every check above passed; `python -m gcpgpu.node.launch exec -- CMD`
reads GCPGPU_SECRETS, runs GCPGPU_SETUP and then becomes CMD. Before all of these, a container started as
root with GCPGPU_USER set runs `python -m gcpgpu.node.launch become-user -- CMD`: the mounts' links made as root,
then CMD (the entrypoint again) as that user, so no job's code runs as root.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gcpgpu.node import workspace  # stdlib only: the user's workdir, mounts, secrets and setup
from gcpgpu.trainer.argv import log_json_path, metrics_off  # stdlib only: the trainer's command-line contract
from gcpgpu.trainer.dist import Rendezvous  # stdlib only: the trainer's own parser numbers nodes the same way

METADATA_URL = "http://metadata.google.internal/computeMetadata/v1"
DEFAULT_MASTER_PORT = 29500
_HOST = re.compile(r"^[A-Za-z0-9_.:\-\[\]]+$")

EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3


class LaunchError(Exception):
    """Why the container will not start the trainer; one line. exit_code: 2 bad input, 3 missing host support."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Metadata:
    """The GCE metadata server, asked at most once per path, and given up on after one failure."""

    def __init__(self, base: str = METADATA_URL, timeout: float = 2.0) -> None:
        self.base = base.rstrip("/")
        self.timeout = timeout
        self._unreachable = False
        self._cache: dict[str, str | None] = {}

    def get(self, path: str) -> str | None:
        """The value at `path` (e.g. instance/machine-type), or None when absent or unreachable."""
        if self._unreachable:
            return None
        if path not in self._cache:
            request = urllib.request.Request(f"{self.base}/{path}", headers={"Metadata-Flavor": "Google"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    self._cache[path] = response.read().decode().strip()
            except urllib.error.HTTPError:
                self._cache[path] = None  # the server answered: this key just isn't set
            except (OSError, ValueError):
                self._unreachable = True  # off GCP (or no route): don't wait again for every key
                return None
        return self._cache[path]


def _int(value: str, name: str, low: int, high: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        span = f"{low}..{high}" if high is not None else f"{low} or more"
        raise LaunchError(f"{name}={value!r} is not a whole number {span}", EXIT_BAD_INPUT)
    return number


def parse_cluster_spec(text: str) -> dict[str, str]:
    """Vertex AI's CLUSTER_SPEC -> {nnodes, node_rank, master_addr, master_port} as strings.

    The trainer's own parser (gcpgpu.trainer.dist, torch-free) decides, so the entrypoint and a
    trainer started without it number the nodes the same way: workerpool0's host is node 0 and
    the rendezvous, workerpool1's hosts follow in order.
    """
    from gcpgpu.trainer.dist import rendezvous_from_cluster_spec

    try:
        rdzv = rendezvous_from_cluster_spec(text)
    except ValueError as e:
        raise LaunchError(str(e), EXIT_BAD_INPUT) from None
    return {
        "nnodes": str(rdzv.nnodes),
        "node_rank": str(rdzv.node_rank),
        "master_addr": rdzv.master_addr,
        "master_port": str(rdzv.master_port),
    }


_FIELDS = {
    # field: (env var, metadata attribute)
    "nnodes": ("NNODES", "gcpgpu-nnodes"),
    "node_rank": ("NODE_RANK", "gcpgpu-node-rank"),
    "master_addr": ("MASTER_ADDR", "gcpgpu-master-addr"),
    "master_port": ("MASTER_PORT", "gcpgpu-master-port"),
}


def rendezvous(environ: Mapping[str, str], metadata: Metadata | None, platform: str) -> Rendezvous:
    """torchrun's rendezvous for this node: per field, the environment, CLUSTER_SPEC, metadata, one node."""
    found: dict[str, tuple[str, str]] = {}
    for name, (var, _) in _FIELDS.items():
        if environ.get(var, "").strip():
            found[name] = (environ[var].strip(), f"env {var}")
    if len(found) < len(_FIELDS) and environ.get("CLUSTER_SPEC", "").strip():
        for name, value in parse_cluster_spec(environ["CLUSTER_SPEC"]).items():
            found.setdefault(name, (value, "CLUSTER_SPEC"))
    if len(found) < len(_FIELDS) and metadata is not None and platform != "vertex":
        for name, (_, attribute) in _FIELDS.items():
            if name not in found:
                value = metadata.get(f"instance/attributes/{attribute}")
                if value:
                    found[name] = (value, f"metadata {attribute}")
    nnodes = _int(found.get("nnodes", ("1", ""))[0], _FIELDS["nnodes"][0], 1)
    rank = _int(found.get("node_rank", ("0", ""))[0], _FIELDS["node_rank"][0], 0)
    if rank >= nnodes:
        raise LaunchError(f"NODE_RANK={rank} is not below NNODES={nnodes}", EXIT_BAD_INPUT)
    if "master_addr" in found:
        master = found["master_addr"][0]
        if not _HOST.match(master):
            raise LaunchError(f"MASTER_ADDR={master!r} is not a host name or IP address", EXIT_BAD_INPUT)
    elif nnodes > 1:
        raise LaunchError(
            f"{nnodes} nodes but no master address: set MASTER_ADDR (or CLUSTER_SPEC, or the VM metadata "
            "attribute gcpgpu-master-addr)",
            EXIT_BAD_INPUT,
        )
    else:
        master = "127.0.0.1"
    port = _int(found.get("master_port", (str(DEFAULT_MASTER_PORT), ""))[0], "MASTER_PORT", 1, 65535)
    return Rendezvous(nnodes, rank, master, port, {name: src for name, (_, src) in found.items()})


def detect_platform(environ: Mapping[str, str]) -> tuple[str, str]:
    """(platform, why): where the container runs, which decides how its NICs are named."""
    from gcpgpu.nccl import PLATFORMS

    forced = environ.get("GCPGPU_PLATFORM", "").strip()
    if forced:
        if forced not in PLATFORMS:
            raise LaunchError(f"GCPGPU_PLATFORM={forced!r} is not one of {', '.join(PLATFORMS)}", EXIT_BAD_INPUT)
        return forced, "GCPGPU_PLATFORM"
    if environ.get("CLUSTER_SPEC") or environ.get("CLOUD_ML_JOB_ID"):
        return "vertex", "Vertex AI environment"
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "container", "Kubernetes environment"
    return "vm", "default"


def detect_machine_type(environ: Mapping[str, str], metadata: Metadata | None) -> tuple[str | None, str]:
    """(machine type or None, where it came from)."""
    forced = environ.get("GCPGPU_MACHINE_TYPE", "").strip()
    if forced:
        return forced.rsplit("/", 1)[-1], "GCPGPU_MACHINE_TYPE"
    value = metadata.get("instance/machine-type") if metadata is not None else None
    if value:
        # projects/123456789/machineTypes/a3-highgpu-8g
        return value.rsplit("/", 1)[-1], "metadata server"
    return None, "nowhere"


def reporter_args(
    environ: Mapping[str, str], args: Sequence[str] | None, node_rank: int, platform: str, metadata: Metadata | None
) -> tuple[list[str] | None, str | None]:
    """(gcpgpu.node.reporter's arguments, or None; a warning when it would be wanted but cannot run).

    Wanted on node 0 when the trainer writes `--log-json FILE` (the reporter reads that file) and
    GCPGPU_METRICS is not 0. `args` is None when the container runs a command, not the trainer.
    """
    if not args or node_rank != 0:
        return None, None
    log_json = log_json_path(args)
    if log_json is None or metrics_off(environ):
        return None, None
    cluster = environ.get("GCPGPU_CLUSTER", "").strip()
    job = environ.get("CLOUD_ML_JOB_ID", "").strip()
    if not cluster and not job and platform != "vertex" and metadata is not None:
        cluster = metadata.get("instance/attributes/gcpgpu-cluster") or ""
    if job and not cluster:
        return ["--log-json", log_json, "--job", job], None
    if cluster:
        return ["--log-json", log_json, "--cluster", cluster], None
    return None, (f"no cluster name or Vertex AI job id (GCPGPU_CLUSTER, CLOUD_ML_JOB_ID): the trainer's numbers "
                  f"stay in {log_json} and are not sent to Cloud Monitoring")


def nics_args(environ: Mapping[str, str], platform: str, metadata: Metadata | None) -> list[str] | None:
    """gcpgpu.node.nics's arguments on a cluster's node (every node, whatever it runs), else None."""
    if platform == "vertex" or metrics_off(environ):
        return None
    cluster = environ.get("GCPGPU_CLUSTER", "").strip()
    if not cluster and metadata is not None:
        cluster = metadata.get("instance/attributes/gcpgpu-cluster") or ""
    if not cluster:
        return None
    return ["--cluster", cluster, "--sysroot", environ.get("GCPGPU_SYSROOT", "").strip() or "/"]


def numa_binding(environ: Mapping[str, str], machine: object | None) -> tuple[list[str], str | None]:
    """(torchrun's NUMA arguments, the job log's line about them): bound on a GPU machine where torchrun can."""
    if machine is None or not getattr(machine, "gpu_count", 0):
        return [], None
    if environ.get("GCPGPU_NUMA_BINDING", "").strip().lower() in ("0", "false", "no", "off"):
        return [], "NUMA binding: off (GCPGPU_NUMA_BINDING=0): ranks run on any CPU"
    import importlib.util

    spec = importlib.util.find_spec("torch")
    run = Path(spec.origin).parent / "distributed" / "run.py" if spec and spec.origin else None
    try:
        has = run is not None and "numa-binding" in run.read_text()
    except OSError:
        has = False
    if not has:
        return [], ("NUMA binding: not applied: this image's torchrun has no --numa-binding (PyTorch 2.9 or later "
                    "has it); ranks run on any CPU")
    return ["--numa-binding", "node"], ("NUMA binding: each rank's CPU threads and memory on its GPU's NUMA node "
                                        "(torchrun --numa-binding node)")


@dataclass
class Plan:
    exports: dict[str, str]
    prepend: frozenset[str]
    notes: list[str]
    warnings: list[str]
    reporter: list[str] | None = None  # gcpgpu.node.reporter's arguments (--pid is the entrypoint's)
    workdir: str | None = None  # where the job's --workdir was unpacked: the setup's and command's directory
    nics: list[str] | None = None  # gcpgpu.node.nics's arguments (--pid is the entrypoint's)
    numa: list[str] | None = None  # torchrun's NUMA binding arguments
    unset: tuple[str, ...] = ()  # gcpgpu's own NCCL_* from submit that this node's profile does not set

    def shell(self) -> str:
        from gcpgpu.nccl import export_lines

        lines = [f"unset {name}" for name in self.unset] + export_lines(self.exports, self.prepend)
        if self.reporter:
            lines.append(f"gcpgpu_reporter_args=({' '.join(shlex.quote(a) for a in self.reporter)})")
        if self.nics:
            lines.append(f"gcpgpu_nics_args=({' '.join(shlex.quote(a) for a in self.nics)})")
        if self.numa:
            lines.append(f"gcpgpu_numa_args=({' '.join(shlex.quote(a) for a in self.numa)})")
        if self.workdir:
            lines.append(f"cd -- {shlex.quote(self.workdir)}")
        return "\n".join(lines) + "\n"


def plan(environ: Mapping[str, str], metadata: Metadata | None = None, root: str | Path = "/",
         args: Sequence[str] | None = None) -> Plan:
    """Everything the entrypoint exports, or a LaunchError saying why the trainer must not start.

    `args`: the trainer's flags (None when the container runs a command), for the metrics reporter.
    """
    from gcpgpu import catalog, nccl
    from gcpgpu.errors import UsageProblem

    notes: list[str] = []
    warnings: list[str] = []
    platform, platform_why = detect_platform(environ)
    name, name_source = detect_machine_type(environ, metadata)
    machine = None
    if name is None:
        warnings.append("machine type unknown (no GCPGPU_MACHINE_TYPE, no metadata server): no NCCL profile applied")
    else:
        machine = catalog.machine_types().get(name.lower())
        if machine is None:
            warnings.append(f"{name} is not a GPU machine type gcpgpu knows: no NCCL profile applied")

    # Input mistakes first (exit 2), before what the host lacks (exit 3).
    rdzv = rendezvous(environ, metadata, platform)
    nproc = environ.get("NPROC_PER_NODE", "").strip() or str(machine.gpu_count if machine else 1)
    _int(nproc, "NPROC_PER_NODE", 1)

    exports: dict[str, str] = {"GCPGPU_PLATFORM": platform}
    prepend: frozenset[str] = frozenset()
    unset: tuple[str, ...] = ()
    if name:
        exports["GCPGPU_MACHINE_TYPE"] = name
    if machine is not None:
        flavor = environ.get("GCPGPU_NCCL_FLAVOR", "").strip() or machine.gpudirect
        if flavor not in nccl.FLAVORS:
            raise LaunchError(f"GCPGPU_NCCL_FLAVOR={flavor!r} is not one of {', '.join(nccl.FLAVORS)}", EXIT_BAD_INPUT)
        image_flavor = environ.get("GCPGPU_IMAGE_FLAVOR", "").strip()
        problems: list[str] = []
        if image_flavor and flavor != "none" and image_flavor != flavor:
            problems.append(
                f"this image was built with FLAVOR={image_flavor} but {machine.name} needs {flavor}: rebuild "
                f"with 'gcpgpu container build --flavor {flavor}'"
            )
        user_nccl, injected = user_settings(environ)
        try:
            result = nccl.render_env(machine, platform, user_nccl, flavor=flavor, source="environment variable")
        except UsageProblem as e:
            raise LaunchError(e.format_message(), EXIT_BAD_INPUT) from None
        check = nccl.check_host(result, root)
        problems += list(check.problems)
        warnings += list(check.warnings)
        if problems:
            what = "; ".join(problems)
            if environ.get("GCPGPU_SKIP_NCCL_CHECK", "") in ("1", "true", "yes"):
                warnings.append(f"starting anyway (GCPGPU_SKIP_NCCL_CHECK): {what}")
            else:
                needs = nccl.PROFILES[flavor].host_needs
                raise LaunchError(
                    f"{machine.name} needs {nccl.flavor_title(flavor)} but {what}"
                    + (f" (it needs {needs})" if needs else "")
                    + f". Use an image built with --flavor {flavor}, set GCPGPU_NCCL_FLAVOR=none for plain "
                    "sockets (slow), or GCPGPU_SKIP_NCCL_CHECK=1 to start anyway"
                )
        exports["GCPGPU_NCCL_FLAVOR"] = flavor
        exports.update(result.env)
        prepend = result.prepend
        unset = tuple(sorted(injected - set(result.env)))
        mine = sorted(name for name in result.env if name not in user_nccl)
        said = f"; set {len(mine)}: {', '.join(mine)}" if mine else ""
        kept = f"; yours kept: {', '.join(sorted(result.overridden))}" if result.overridden else ""
        notes.append(f"{machine.name} ({name_source}): NCCL profile {flavor} on {platform} ({platform_why}){said}{kept}")
    elif name:
        notes.append(f"{name} ({name_source}) on {platform}")

    exports.update(
        GCPGPU_NNODES=str(rdzv.nnodes),
        GCPGPU_NODE_RANK=str(rdzv.node_rank),
        GCPGPU_MASTER_ADDR=rdzv.master_addr,
        GCPGPU_MASTER_PORT=str(rdzv.master_port),
        GCPGPU_NPROC_PER_NODE=nproc,
    )
    # The same values under torchrun's names, so a user's own launch line reads them on any target.
    exports.update(NNODES=str(rdzv.nnodes), NODE_RANK=str(rdzv.node_rank), MASTER_ADDR=rdzv.master_addr,
                   MASTER_PORT=str(rdzv.master_port), NPROC_PER_NODE=nproc)
    how = ", ".join(sorted(set(rdzv.sources.values()))) or "single node"
    notes.append(
        f"node {rdzv.node_rank} of {rdzv.nnodes}, master {rdzv.master_addr}:{rdzv.master_port} ({how}), "
        f"{nproc} processes"
    )
    reporter, why_not = reporter_args(environ, args, rdzv.node_rank, platform, metadata)
    if reporter:
        notes.append(f"metrics reporter: {' '.join(reporter[2:])}, following {reporter[1]}")
    elif why_not:
        warnings.append(why_not)
    nics = nics_args(environ, platform, metadata)
    if nics:
        notes.append(f"NIC counters: gcpgpu.node.nics {' '.join(nics)}, every second")
    numa, numa_note = numa_binding(environ, machine)
    notes += [numa_note] if numa_note else []
    return Plan(exports, prepend, notes, warnings, reporter, nics=nics, numa=numa, unset=unset)


def user_settings(environ: Mapping[str, str]) -> tuple[dict[str, str], set[str]]:
    """(the user's NCCL_* settings, the NCCL_* names gcpgpu's profile set at submit): GCPGPU_NCCL_USER names
    the user's; without it, every NCCL_* in the environment is (a `docker run -e`, an older job)."""
    nccl = {k: v for k, v in environ.items() if k.startswith("NCCL_")}
    listed = environ.get("GCPGPU_NCCL_USER")
    if listed is None:
        return nccl, set()
    names = {n.strip() for n in listed.split(",") if n.strip()}
    return {k: v for k, v in nccl.items() if k in names}, set(nccl) - names


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "gcpgpu-entrypoint"
    environ = os.environ
    metadata = Metadata(environ.get("GCPGPU_METADATA_URL", "").strip() or METADATA_URL)
    if argv[:1] == ["exec"]:
        return workspace.run(argv[2:] if argv[1:2] == ["--"] else argv[1:], environ, metadata, prog)
    if argv[:1] == ["become-user"]:  # root's part of the entrypoint: the mounts' links, then GCPGPU_USER
        return workspace.become_user(argv[2:] if argv[1:2] == ["--"] else argv[1:], environ, prog)
    if argv[:1] not in ([], ["env"]) or argv[1:2] not in ([], ["--"]):
        print(f"{prog}: usage: python -m gcpgpu.node.launch [env [-- ARGS...] | exec -- CMD... | become-user -- CMD...]", file=sys.stderr)
        return EXIT_BAD_INPUT
    # The container's arguments: trainer flags, unless the first is a command (as the entrypoint decides).
    rest = argv[2:]
    args = rest if not rest or rest[0].startswith("-") else None
    try:
        result = plan(environ, metadata, environ.get("GCPGPU_SYSROOT", "").strip() or "/", args)
        # Files are written only once the machine and the rendezvous passed their checks.
        workdir = workspace.unpack_workdir(environ)
        if workdir is not None:
            result.workdir = str(workdir)
            result.notes.append(f"workdir: {environ['GCPGPU_WORKDIR'].strip()} unpacked into {workdir}")
        result.notes += [f"mount {note}" for note in workspace.make_mounts(environ)]
    except (LaunchError, workspace.ReplicaError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return e.exit_code
    for line in result.notes:
        print(f"{prog}: {line}", file=sys.stderr)
    for line in result.warnings:
        print(f"{prog}: warning: {line}", file=sys.stderr)
    sys.stdout.write(result.shell())
    return 0


if __name__ == "__main__":
    sys.exit(main())
