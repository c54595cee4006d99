"""The user's own code and data on a job: --workdir, --setup, --mount and --secret, checked before any request.

The training image's entrypoint (gcpgpu/node/workspace.py) does the work on every node or replica from the
environment variables these become (see user_env): GCPGPU_WORKDIR, GCPGPU_SETUP, GCPGPU_MOUNTS,
GCPGPU_SECRETS. Secrets travel as Secret Manager names only; their values are read where the job runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gcpgpu import specfile
from gcpgpu.cluster import munge
from gcpgpu.errors import UsageProblem
from gcpgpu.image.pack import check_folder

# Mount points the image or the entrypoint already owns: a mount there would hide the system, the
# user's unpacked code (/workdir) or Vertex's own bucket mounts (/gcs).
# /mnt/localssd: the node's local SSDs, where the gcsfuse cache and $GCPGPU_CKPT_LOCAL_DIR live (as storage/spec.py)
RESERVED = ("/workdir", "/gcs", "/usr", "/bin", "/lib", "/etc", "/proc", "/sys", "/dev", "/tmp", "/mnt/localssd")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The GCPGPU_* variables a job may set itself (--env, a spec file's env:, --secret), as the READMEs document
# them for users: the machine and its NCCL profile (containers/README.md, gcpgpu/node/launch.py), Nsight
# Systems (containers/README.md), the metrics reporter, the trainer on CPU and its process count
# (gcpgpu/trainer/README.md). Every other GCPGPU_ name is gcpgpu's own: set by job submit from its flags
# (GCPGPU_WORKDIR, _MOUNTS, _SETUP, _SECRETS, each checked there), by the image (GCPGPU_USER, whom the
# entrypoint drops root for), by a recovery (GCPGPU_RESUME, _RESTART) or a test seam (GCPGPU_PYTHON...).
USER_SETTABLE = frozenset({
    "GCPGPU_MACHINE_TYPE", "GCPGPU_PLATFORM", "GCPGPU_NCCL_FLAVOR", "GCPGPU_SKIP_NCCL_CHECK", "GCPGPU_PROFILE",
    "GCPGPU_PROFILE_STEPS", "GCPGPU_PROFILE_DIR", "GCPGPU_OUTPUT_DIR", "GCPGPU_METRICS", "GCPGPU_NPROC_PER_NODE",
    "GCPGPU_TRAINER_ALLOW_CPU", "GCPGPU_TRAINER_MODULE", "GCPGPU_NUMA_BINDING",  # (job submit --no-numa-binding)
})  # fmt: skip
# projects/PROJECT (id or number)/secrets/NAME[/versions/VERSION (a number or latest)]
SECRET = re.compile(r"^projects/([a-z][a-z0-9-]{4,28}[a-z0-9]|\d{1,20})/secrets/([A-Za-z0-9_-]{1,255})"
                    r"(?:/versions/([1-9]\d{0,18}|latest))?$")


@dataclass(frozen=True)
class Mount:
    """A bucket (or a folder in it) made visible at `target` on every node or replica."""

    bucket: str
    path: str  # inside the bucket, no leading or trailing slash; "" for the whole bucket
    target: str
    ro: bool

    @property
    def source(self) -> str:
        return f"gs://{self.bucket}/{self.path}" if self.path else f"gs://{self.bucket}"

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "ro": self.ro}


def parse_mount(value: str, where: str = "--mount") -> Mount:
    """gs://BUCKET[/PATH]:/MOUNTPOINT[:ro|:rw] -> Mount, refusing what the entrypoint could not mount."""
    shown = specfile.shown(value)
    example = f"e.g. {where} gs://my-data/imagenet:/data:ro"
    if not isinstance(value, str) or not value.startswith("gs://"):
        raise UsageProblem(f"{where} {shown} must be gs://BUCKET[/PATH]:/MOUNTPOINT[:ro], {example}")
    rest, ro = value[len("gs://"):], False
    for mode in (":ro", ":rw"):
        if rest.endswith(mode):
            rest, ro = rest[: -len(mode)], mode == ":ro"
            break
    source, sep, target = rest.rpartition(":")
    if sep and not target.startswith("/") and ":/" in source:  # gs://b:/out:rx: a mode, not a mount point
        raise UsageProblem(f"{where} {shown}: {specfile.shown(':' + target)} is not a mode: end with :ro "
                           f"(read-only) or :rw, or nothing (read-write), {example}")
    if sep and not source.partition("/")[0]:
        raise UsageProblem(f"{where} {shown} names no bucket: gs://BUCKET[/PATH], {example}")
    if not sep:
        raise UsageProblem(f"{where} {shown} has no mount point: add :/MOUNTPOINT, {example}")
    bucket, _, path = source.partition("/")
    if not bucket:
        raise UsageProblem(f"{where} {shown} names no bucket: gs://BUCKET[/PATH], {example}")
    if not specfile.BUCKET.match(bucket):
        raise UsageProblem(f"{where} {shown}: {specfile.shown(bucket)} is not a bucket name (3-63 lowercase "
                           "letters, digits, -, _ and ., starting and ending with a letter or digit)")
    path = path.strip("/")
    if any(s in (".", "..", "") for s in path.split("/")) and path:
        raise UsageProblem(f"{where} {shown}: the bucket path has a '.', '..' or empty segment")
    if not target.startswith("/"):
        raise UsageProblem(f"{where} {shown}: the mount point {specfile.shown(target)} must be an absolute path, "
                           f"{example}")
    parts = [p for p in target.split("/") if p]
    if any(p in (".", "..") for p in parts) or re.search(r"[\x00-\x1f\x7f]", target):
        raise UsageProblem(f"{where} {shown}: the mount point must not hold '.', '..' or control characters")
    norm = "/" + "/".join(parts)
    if norm == "/" or any(norm == r or norm.startswith(r + "/") for r in RESERVED):
        raise UsageProblem(f"{where} {shown}: {norm} is reserved (/, {', '.join(RESERVED)} and below them); "
                           "choose another mount point, e.g. /data or /out")
    return Mount(bucket=bucket, path=path, target=norm, ro=ro)


def parse_mounts(values: Any, where: str = "--mount") -> list[Mount]:
    """Repeated --mount values (or a spec file's list) -> Mounts, refusing two on one mount point."""
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        values = [values]
    mounts: list[Mount] = []
    for value in values:
        if is_file_system(value):
            continue  # nfs_mounts'
        mount = parse_mount(str(value) if not isinstance(value, str) else value, where)
        if any(m.target == mount.target for m in mounts):
            raise UsageProblem(f"{where}: two mounts on {mount.target}; give each mount point once")
        mounts.append(mount)
    return mounts


def is_file_system(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("filestore:", "lustre:"))


def nfs_mounts(values: Any, target: str | None, where: str = "--mount") -> list[Any]:
    """A Vertex job's --mount filestore:NAME:/mnt/nfs/DIR (storage.spec.Want each). Vertex AI mounts NFS
    shares under /mnt/nfs/ by a name (aiplatform v1 NfsMount.mountPoint), so the path must say where the
    job will find it; a cluster job gets the cluster's own file systems instead."""
    from gcpgpu.storage.spec import parse_mount as parse_file_system

    values = [values] if isinstance(values, str) else list(values or [])
    out = []
    for value in filter(is_file_system, values):
        if target != "vertex":
            raise UsageProblem(f"{where} {specfile.shown(value)}: a cluster job sees the cluster's file systems; "
                               "attach it to the cluster instead (gcpgpu cluster up NAME --mount KIND:NAME:/PATH)")
        want = parse_file_system(value, where)
        if want.kind != "filestore":
            raise UsageProblem(f"{where} {specfile.shown(value)}: Vertex AI mounts NFS shares only: use "
                               "filestore:NAME:/mnt/nfs/DIR, or run the job on a cluster with the Lustre attached")
        if not re.fullmatch(r"/mnt/nfs/[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}", want.path):
            raise UsageProblem(f"{where} {specfile.shown(value)}: Vertex AI mounts an NFS share at /mnt/nfs/DIR; "
                               f"write e.g. filestore:{want.existing}:/mnt/nfs/shared")
        out.append(want)
    return out


def parse_secrets(values: Any, where: str = "--secret") -> dict[str, str]:
    """ENV=projects/P/secrets/NAME[/versions/V] (repeated, or a spec file's mapping) -> {ENV: full version name}."""
    if values is None:
        return {}
    if isinstance(values, dict):
        items = [(str(k), v) for k, v in values.items()]
    else:
        if isinstance(values, str) or not isinstance(values, (list, tuple)):
            values = [values]
        items = []
        for pair in values:
            name, sep, ref = str(pair).partition("=")
            if not sep:
                raise UsageProblem(f"{where} {specfile.shown(str(pair))} is not ENV=projects/P/secrets/NAME"
                                   f"[/versions/V], e.g. {where} WANDB_API_KEY=projects/my-proj/secrets/wandb")
            items.append((name, ref))
    out: dict[str, str] = {}
    for name, ref in items:
        if not ENV_NAME.match(name):
            raise UsageProblem(f"{where} {specfile.shown(name)} is not an environment variable name (letters, "
                               "digits, _; not starting with a digit)")
        check_env_name(name, where)
        match = SECRET.match(ref) if isinstance(ref, str) else None
        if not match:
            raise UsageProblem(f"{where} {name}={specfile.shown(ref, quote=False)} must name a secret as "
                               "projects/PROJECT/secrets/NAME[/versions/VERSION] (VERSION a number or latest)")
        if match.group(2).startswith(munge.PREFIX):
            raise UsageProblem(f"{where} {name}={specfile.shown(ref, quote=False)} names a Slurm cluster's munge key, "
                               "which no job may read (it would let the job act as any user of that cluster); "
                               "give a secret of your own")
        out[name] = ref if match.group(3) else f"{ref}/versions/latest"
    return out


def check_env_name(name: str, where: str) -> None:
    """Refuse a GCPGPU_* name gcpgpu sets itself (USER_SETTABLE lists those a job may set), one line."""
    if name.startswith("GCPGPU_") and name not in USER_SETTABLE:
        own = {"GCPGPU_WORKDIR": "--workdir", "GCPGPU_MOUNTS": "--mount", "GCPGPU_SETUP": "--setup",
               "GCPGPU_SECRETS": "--secret"}.get(name)
        raise UsageProblem(f"{where} {name} is gcpgpu's own variable, which a job may not set"
                           + (f" (use {own})" if own else "") + "; of GCPGPU_*, a job may set only "
                           + ", ".join(sorted(n.removeprefix("GCPGPU_") for n in USER_SETTABLE)))


def check_setup(spec: Any, target: str | None) -> None:
    """--setup: a command, and a job target to run it on (checked before the target itself is)."""
    if spec.setup is not None:
        if not isinstance(spec.setup, str) or not spec.setup.strip():
            raise UsageProblem("--setup is empty: give a command, e.g. --setup 'pip install -r requirements.txt'")
        specfile.check_utf8(spec.setup, "--setup")
        if target is None:
            raise UsageProblem("--setup runs on the job's nodes before the command: say where the job runs "
                               "(--vertex or --cluster NAME)")


def check(spec: Any, env: dict[str, str]) -> None:
    """Check the spec's workdir, mounts and secrets; normalise them in place on `spec`."""
    if spec.workdir is not None:
        spec.workdir = check_folder(spec.workdir)
    shares = nfs_mounts(spec.mounts, spec.target)
    mounts = parse_mounts(spec.mounts)
    buckets = [m.source + ":" + m.target + (":ro" if m.ro else "") for m in mounts]
    taken = {m.target for m in mounts}
    for w in shares:
        if w.path in taken:
            raise UsageProblem(f"--mount: two mounts on {w.path}; give each mount point once")
        taken.add(w.path)
    spec.mounts = buckets + [f"filestore:{w.existing}:{w.path}" for w in shares]
    spec.secrets = parse_secrets(spec.secrets)
    for name in spec.secrets:
        if name in env:
            raise UsageProblem(f"--secret {name} is also set with --env: keep one (a secret belongs in --secret)")


def user_env(spec: Any, workdir_uri: str | None) -> dict[str, str]:
    """The GCPGPU_* variables the image's entrypoint reads (names of secrets only, never their values)."""
    env: dict[str, str] = {}
    if workdir_uri:
        env["GCPGPU_WORKDIR"] = workdir_uri
    if spec.setup:
        env["GCPGPU_SETUP"] = spec.setup
    mounts = parse_mounts(spec.mounts)
    if mounts:
        env["GCPGPU_MOUNTS"] = json.dumps([m.as_json() for m in mounts], separators=(",", ":"))
    if spec.secrets:
        env["GCPGPU_SECRETS"] = json.dumps(dict(sorted(spec.secrets.items())), separators=(",", ":"))
    return env


def node_mounts(spec: Any, workdir_uri: str | None, buckets: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """What a cluster node mounts for the job: the buckets mounted writable at /gcs/BUCKET (`buckets`, the
    staging bucket when there is a workdir, each writable --mount's), and the --mount binds (dicts for the
    job agent: bucket, path, target, ro)."""
    out = list(buckets)
    if workdir_uri:
        out.append(workdir_uri[len("gs://"):].partition("/")[0])
    binds = []
    for m in parse_mounts(spec.mounts):
        if not m.ro:
            out.append(m.bucket)
        binds.append({"bucket": m.bucket, "path": m.path, "target": m.target, "ro": m.ro})
    return list(dict.fromkeys(out)), binds


def container_call(job: Any) -> tuple[list[str], list[str]]:
    """(command, args) for the container: a command goes in args behind the image's own entrypoint on gcpgpu's
    image, which starts as root and becomes its unprivileged user before it runs anything (replacing the
    entrypoint would run the command as root), and on any image when the job brings code, setup, mounts or
    secrets, which that entrypoint (gcpgpu/node/workspace.py) sets up first. Otherwise (another image) as given."""
    from gcpgpu.trainer.argv import IMAGE

    spec = job.spec
    if job.command and (IMAGE.search(job.image) or (not job.bundled_trainer and (
            spec.workdir or spec.setup or spec.mounts or spec.secrets))):
        return [], [*job.command, *job.args]
    return job.command, job.args


def split_command(value: str, where: str = "--command") -> list[str]:
    """A command line split as a shell would (quotes group words), refusing one a shell could not split."""
    import shlex

    try:
        return shlex.split(value)
    except ValueError as e:  # "No closing quotation", "No escaped character"
        raise UsageProblem(f"{where} {specfile.shown(value)}: {str(e).lower()}; quote it as a shell would, "
                           "e.g. --command 'python -m mypkg.train --name \"run 1\"'") from None


# What makes a line a shell's to run, outside quotes: lists and pipes, redirections, background, a comment, and
# (anywhere but in single quotes) an expansion. Split into words, each would reach the program as an argument.
_OPERATORS = ("&&", "||", ">>", "<<", ";", "|", "&", "<", ">", "\n")


def shell_syntax(line: str) -> list[str]:
    """The pieces of shell syntax in `line` that splitting it into words would pass on as text ('&&', '|', '>',
    '$', '`', '*', '~', '#' ...), in order, quotes and backslashes read as a shell reads them; [] when none."""
    found: list[str] = []
    quote = None
    word_start = True
    i = 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            i += 1  # the next character is taken as it is, inside double quotes too
        elif quote == '"':
            if c == '"':
                quote = None
            elif c in "$`":
                found.append(c)
        elif c in "'\"":
            quote = c
        elif c in "$`":
            found.append(c)
        elif op := next((op for op in _OPERATORS if line.startswith(op, i)), None):
            found.append(op)
            i += len(op) - 1
        elif c in "*?" or (word_start and c in "~#"):
            found.append(c)  # a glob, a home directory, a comment
        word_start = c in " \t"
        i += 1
    return found


def command_words(line: str, where: str = "--command") -> list[str]:
    """A --command line as the container's argv. A line with shell syntax (`;`, `&&`, `||`, `|`, redirections,
    `$VARIABLES`, backquotes, globs: shell_syntax) runs under `sh -c`, since neither Vertex AI nor docker reads
    it and the entrypoint sets the variables only where the job runs; a line with none is split as a shell
    would split it, the same words. The bundled trainer's line is kept as split (its arguments are read here):
    it may hold $VARIABLES, which it gets as written, and none of the rest."""
    from gcpgpu.trainer.argv import runs_bundled_trainer

    words = split_command(line, where)
    syntax = shell_syntax(line)
    if not syntax or not words:
        return words
    if runs_bundled_trainer("", words):
        other = [s for s in syntax if s != "$"]
        if not other:
            return words
        raise UsageProblem(f"{where} {specfile.shown(line)}: the bundled trainer's line holds shell syntax "
                           f"({other[0]!r}), which would reach it as an argument: give its flags after --, or "
                           "run it from a script of yours")
    return ["sh", "-c", line]
