"""What a node or replica prepares for the user's own code: its working folder, data mounts, secrets, setup.

containers/entrypoint.sh drives it through gcpgpu.node.launch, from environment variables that `job submit`
sets identically on a cluster node's container and on a Vertex AI worker pool:

  GCPGPU_WORKDIR=gs://BUCKET/PATH.tar.gz   the packed --workdir, read at /gcs/BUCKET/PATH.tar.gz (Vertex AI
                                         mounts every bucket under /gcs; a cluster node binds its staging
                                         bucket there) and unpacked into /workdir (GCPGPU_WORKDIR_DIR), which
                                         becomes the working directory of the setup and the command. An entry
                                         that would land outside it (absolute path, .., a link out, a device)
                                         refuses the whole archive before anything is written, and so do
                                         bytes whose SHA-256 is not the one the name workdir-SHA.tar.gz states
                                         (the staging bucket is writable by every job on a cluster).
  GCPGPU_MOUNTS='[{"source": "gs://B/P", "target": "/data", "ro": true}]'
                                         each target made a link to /gcs/B/P, unless it is a mount point already
                                         (a cluster node bind-mounts Cloud Storage FUSE there itself). The folders
                                         made for it (an output's, the target's parents) are made without following
                                         links: a link a job planted in /gcs refuses the mount in one line.
  GCPGPU_USER=trainer                    the user that runs everything below (the image sets it): started as
                                         root, the entrypoint makes the mounts' links as root (/data needs it),
                                         then becomes this user (`become_user`) before it unpacks, sets up or
                                         runs anything; a root user here is refused. Unset: stay as started.
  GCPGPU_SECRETS='{"HF_TOKEN": "projects/P/secrets/NAME/versions/V"}'
                                         names only: each version is read from Secret Manager where the job
                                         runs, with the service account's token from the metadata server, and
                                         put into the environment of the setup and the command, never printed.
  GCPGPU_SETUP='pip install -r requirements.txt'
                                         `bash -c` once per node or replica, before the command, its output in
                                         the job's log; a failure ends the replica with its exit status and the
                                         line `gcpgpu-entrypoint: setup failed (exit N): <its last line>`.
Test seams: GCPGPU_GCS_ROOT (stands in for /gcs), GCPGPU_SECRETMANAGER_URL (Secret Manager's endpoint;
with GCPGPU_SECRETMANAGER_TOKEN, the token the emulator gives a job for its own secrets alone),
GCPGPU_METADATA_URL (gcpgpu.node.launch's).

Secret values never pass through the shell: `python -m gcpgpu.node.launch exec -- CMD` reads them, runs the
setup with them and then becomes CMD (exec), so no plan the entrypoint evals, no `set -x` trace and no
file holds them.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import json
import os
import posixpath
import pwd
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

EXIT_BAD_INPUT = 2  # the same codes as gcpgpu.node.launch: 2 a bad value, 3 what the replica cannot get or make
EXIT_REFUSED = 3
DEFAULT_WORKDIR = "/workdir"
DEFAULT_GCS_ROOT = "/gcs"
SECRETMANAGER_URL = "https://secretmanager.googleapis.com"
TOKEN_PATH = "instance/service-accounts/default/token"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET = re.compile(r"^projects/[^/\s]+/secrets/[^/\s]+(?:/versions/[^/\s]+)?$")
_TRANSIENT = (408, 429, 500, 502, 503, 504)
_STAGED = re.compile(r"^workdir-([0-9a-f]{64})\.tar\.gz$")  # job submit's name: the SHA-256 of the bytes
MAX_ARCHIVE = 100 * 2**20  # bytes: the packer's cap (gcpgpu.image.pack.MAX_PACKED); a bigger one was not packed


class ReplicaError(Exception):
    """Why the replica will not run the user's command; one line. exit_code: 2 bad input, 3 a missing thing."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Metadata(Protocol):
    """What is asked of gcpgpu.node.launch's metadata server client (gcpgpu.node.launch imports this module)."""

    def get(self, path: str) -> str | None: ...


def gcs_path(url: str, environ: Mapping[str, str], field: str) -> tuple[Path, Path]:
    """(the bucket's folder, the object's path) where gs://BUCKET/PATH is read here: /gcs/BUCKET/PATH, as
    Vertex AI mounts buckets."""
    bucket, _, rest = url[len("gs://"):].partition("/") if url.startswith("gs://") else ("", "", "")
    if not bucket:
        raise ReplicaError(f"{field}: {url!r} is not gs://BUCKET[/PATH]", EXIT_BAD_INPUT)
    if ".." in PurePosixPath(rest).parts:
        raise ReplicaError(f"{field}: {url!r} has a '..' in its path", EXIT_BAD_INPUT)
    bucket_dir = Path(environ.get("GCPGPU_GCS_ROOT", "").strip() or DEFAULT_GCS_ROOT) / bucket
    return bucket_dir, bucket_dir / rest.strip("/") if rest.strip("/") else bucket_dir


# -- the working folder ------------------------------------------------------------------------------------


def _escapes(path: str) -> bool:
    normal = posixpath.normpath(path)
    return normal == ".." or normal.startswith("../") or normal.startswith("/")


def _why_unsafe(member: tarfile.TarInfo) -> str | None:
    """Why this archive entry could write outside the folder it is unpacked into, or None."""
    name = member.name
    if name.startswith("/") or ".." in PurePosixPath(name).parts:
        return "its path leaves the folder"
    if member.issym():
        if member.linkname.startswith("/") or _escapes(posixpath.join(posixpath.dirname(name), member.linkname)):
            return f"it links to {member.linkname!r}, outside the folder"
    elif member.islnk():
        if member.linkname.startswith("/") or _escapes(member.linkname):
            return f"it links to {member.linkname!r}, outside the folder"
    elif not (member.isfile() or member.isdir()):
        return "it is not a file, folder or link"
    return None


def _verified(archive: Path, source: str) -> IO[bytes] | None:
    """A private copy of a staged archive whose name states its SHA-256 (workdir-SHA.tar.gz, as job submit
    names it), checked against that digest; None for another name (an archive the image or a volume
    brought). The copy is what gets unpacked: the staging bucket is writable by every job of the project,
    so the object could change between the check and the unpacking."""
    stated = _STAGED.match(archive.name)
    if stated is None:
        return None
    copy = tempfile.SpooledTemporaryFile(max_size=16 * 2**20)
    digest, size = hashlib.sha256(), 0
    try:
        with archive.open("rb") as f:
            while chunk := f.read(2**20):
                size += len(chunk)
                if size > MAX_ARCHIVE:
                    break
                digest.update(chunk)
                copy.write(chunk)
    except OSError as e:
        copy.close()
        raise ReplicaError(f"GCPGPU_WORKDIR: could not read {source}: {e.strerror or e}") from None
    actual = digest.hexdigest()
    why = (f"over {MAX_ARCHIVE // 2**20} MiB, more than any packed workdir" if size > MAX_ARCHIVE
           else None if actual == stated.group(1) else f"SHA-256 {actual[:16]}..., not {stated.group(1)[:16]}...")
    if why:
        copy.close()
        raise ReplicaError(f"GCPGPU_WORKDIR: refused {source}: its bytes are not what its name states ({why}): it "
                           "changed after job submit staged it; nothing unpacked (submit again to stage it anew)",
                           EXIT_BAD_INPUT)
    copy.seek(0)
    return copy


def unpack_workdir(environ: Mapping[str, str]) -> Path | None:
    """Unpack GCPGPU_WORKDIR's archive into the working folder and return it (None without a workdir)."""
    source = environ.get("GCPGPU_WORKDIR", "").strip()
    if not source:
        return None
    dest = Path(environ.get("GCPGPU_WORKDIR_DIR", "").strip() or DEFAULT_WORKDIR)
    if source.startswith("/"):
        archive = Path(source)  # a local archive: the image or a volume brought it
    else:
        bucket_dir, archive = gcs_path(source, environ, "GCPGPU_WORKDIR")
        if not bucket_dir.is_dir():
            raise ReplicaError(f"GCPGPU_WORKDIR: {source} is not readable here: its bucket is not mounted at "
                              f"{bucket_dir}")
    if not archive.is_file():
        raise ReplicaError(f"GCPGPU_WORKDIR: {source} is not there ({archive} is missing)")
    copy = _verified(archive, source)
    try:
        with copy if copy is not None else archive.open("rb") as raw, tarfile.open(fileobj=raw, mode="r:*") as tar:
            members = tar.getmembers()
            for member in members:
                why = _why_unsafe(member)
                if why:
                    raise ReplicaError(f"GCPGPU_WORKDIR: refused {source}: entry {member.name!r} would land outside "
                                      f"{dest} ({why}); nothing unpacked", EXIT_BAD_INPUT)
            dest.mkdir(parents=True, exist_ok=True)
            now = time.time()
            for member in members:
                member.mtime = now  # the packer zeroes times for a stable digest; tools such as make want real ones
            # The data filter re-checks against the disk as it writes (a link already in the folder).
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **safe)  # noqa: S202 (every member checked above)
    except getattr(tarfile, "FilterError", ()) as e:
        raise ReplicaError(f"GCPGPU_WORKDIR: refused {source}: {e}", EXIT_BAD_INPUT) from None
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ReplicaError(f"GCPGPU_WORKDIR: could not unpack {source} into {dest}: {e}") from None
    return dest


# -- data mounts -------------------------------------------------------------------------------------------


# O_PATH: a folder the user may pass through but not list is walked all the same; O_NOFOLLOW | O_DIRECTORY:
# a link (or a file) is ENOTDIR (ELOOP on some kernels), never followed.
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _make_dirs(path: Path, owner: tuple[int, int] | None, top: Path, what: str) -> None:
    """mkdir -p of `path` below `top` (which must be there), one name at a time from an open folder and
    never through a link: root makes these for the job's user, and a link a job planted (in /gcs, a
    bucket every job may write) must not make it create, or hand over, a folder anywhere else. The
    folders made here are given to `owner` (uid, gid) when one is named. A link or a file on the way
    refuses the mount (ReplicaError, one line)."""
    fd = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parts = path.relative_to(top).parts
        for i, part in enumerate(parts):
            try:
                try:
                    step = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    try:
                        os.mkdir(part, dir_fd=fd)
                        if owner:
                            os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
                    except FileExistsError:
                        pass
                    step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise  # make_mounts says who may not write where
                raise ReplicaError(f"{what}: {top.joinpath(*parts[: i + 1])} is a link (or a file), not a folder: "
                                  "mount folders are made without following links; refused") from None
            os.close(fd)
            fd = step
    finally:
        os.close(fd)


def make_mounts(environ: Mapping[str, str], owner: tuple[int, int] | None = None) -> list[str]:
    """Point every GCPGPU_MOUNTS target at its bucket's folder under /gcs; one note per mount. `owner`: the
    (uid, gid) that gets the folders made here, when root makes them for the user the job runs as."""
    raw = environ.get("GCPGPU_MOUNTS", "").strip()
    if not raw:
        return []
    try:
        mounts = json.loads(raw)
    except ValueError as e:
        raise ReplicaError(f"GCPGPU_MOUNTS is not JSON ({e})", EXIT_BAD_INPUT) from None
    if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
        raise ReplicaError('GCPGPU_MOUNTS must be a JSON list of {"source": "gs://...", "target": "/...", "ro": ...}',
                          EXIT_BAD_INPUT)
    notes = []
    for mount in mounts:
        source, target, read_only = mount.get("source"), mount.get("target"), bool(mount.get("ro"))
        if not isinstance(source, str) or not isinstance(target, str) or not target.startswith("/") \
                or posixpath.normpath(target) == "/":
            raise ReplicaError(f"GCPGPU_MOUNTS: {mount!r} needs a gs:// source and an absolute target other than /",
                              EXIT_BAD_INPUT)
        bucket_dir, local = gcs_path(source, environ, "GCPGPU_MOUNTS")
        where = Path(posixpath.normpath(target))
        what = f"GCPGPU_MOUNTS: {source} on {where}"
        if os.path.ismount(where):
            notes.append(f"{where}: {source} already mounted")
            continue
        if not bucket_dir.is_dir():
            raise ReplicaError(f"{what}: the bucket is not mounted at {bucket_dir}")
        try:
            if not local.is_dir():
                if read_only:
                    raise ReplicaError(f"{what}: nothing at {source} to read ({local} is missing)")
                _make_dirs(local, owner, bucket_dir.parent, what)  # an output folder the job will fill
            _make_dirs(where.parent, owner, Path("/"), what)  # first: nothing below is done through a link
            if where.is_symlink():
                if os.readlink(where) == str(local):  # made already (by root, before it became GCPGPU_USER)
                    notes.append(f"{where} -> {source}{' (read-only)' if read_only else ''}")
                    continue
                where.unlink()
            elif where.is_dir():
                if any(where.iterdir()):
                    raise ReplicaError(f"{what}: {where} is a folder with files in this image; choose another mount "
                                      "point")
                where.rmdir()
            elif where.exists():
                raise ReplicaError(f"{what}: {where} is a file in this image; choose another mount point")
            os.symlink(local, where)
        except OSError as e:
            raise ReplicaError(f"{what}: cannot make {where} point at {local}: {e.strerror or e} (this container's "
                              f"user may not write {where.parent}: run it as root, or mount under a folder it owns)"
                              ) from None
        # A link cannot refuse writes: read-only holds where the node mounts the bucket read-only itself.
        notes.append(f"{where} -> {source}{' (read-only)' if read_only else ''}")
    return notes


# -- root only for the links: then the image's user ------------------------------------------------------


def image_user(name: str) -> pwd.struct_passwd:
    """GCPGPU_USER (a name or a uid) as this image's passwd entry; never root."""
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        raise ReplicaError(f"GCPGPU_USER: no user {name!r} in this image (containers/Dockerfile makes 'trainer')",
                          EXIT_BAD_INPUT) from None
    if entry.pw_uid == 0:
        raise ReplicaError(f"GCPGPU_USER: {name!r} is root, and gcpgpu runs no job's code as root: name an "
                          "unprivileged user (the image's is 'trainer')", EXIT_BAD_INPUT)
    return entry


def drop_privileges(entry: pwd.struct_passwd) -> None:
    """Become `entry` for good: its groups, its group, then its uid (real, effective and saved)."""
    os.setgroups(os.getgrouplist(entry.pw_name, entry.pw_gid))
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise ReplicaError(f"GCPGPU_USER: {entry.pw_name} could become root again; refusing to run as it")


def become_user(argv: Sequence[str], environ: Mapping[str, str], prog: str = "gcpgpu-entrypoint") -> int:
    """As root: make the mounts' links (a top-level /data needs root), become GCPGPU_USER with its HOME, and
    exec argv (the entrypoint again); returns only on a failure (its exit status)."""
    name = environ.get("GCPGPU_USER", "").strip()
    try:
        entry = image_user(name)
        make_mounts(environ, owner=(entry.pw_uid, entry.pw_gid))  # the notes come when the user's run remakes them
        drop_privileges(entry)
    except ReplicaError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"{prog}: GCPGPU_USER: cannot become {name}: {e.strerror or e}", file=sys.stderr)
        return EXIT_REFUSED
    return run_command(argv, {**environ, "HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name},
                       prog)


def run_command(argv: Sequence[str], env: Mapping[str, str], prog: str) -> int:
    """Replace this process with argv (nothing to run: 0); when it cannot start, say so and return
    the shell's status for it (127 not found, 126 not runnable)."""
    if not argv:
        return 0
    try:
        os.execvpe(argv[0], list(argv), dict(env))
    except OSError as e:
        print(f"{prog}: cannot run {argv[0]}: {e.strerror or e}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    return EXIT_REFUSED  # not reached: exec never returns


# -- secrets -------------------------------------------------------------------------------------------------


def secret_names(environ: Mapping[str, str]) -> dict[str, str]:
    """GCPGPU_SECRETS as {ENV: projects/P/secrets/NAME/versions/V}, version latest where none is named."""
    raw = environ.get("GCPGPU_SECRETS", "").strip()
    if not raw:
        return {}
    try:
        wanted = json.loads(raw)
    except ValueError as e:
        raise ReplicaError(f"GCPGPU_SECRETS is not JSON ({e})", EXIT_BAD_INPUT) from None
    if not isinstance(wanted, dict):
        raise ReplicaError('GCPGPU_SECRETS must be a JSON object {"ENV": "projects/P/secrets/NAME/versions/V"}',
                          EXIT_BAD_INPUT)
    out = {}
    for env, name in wanted.items():
        if not _ENV_NAME.match(env):
            raise ReplicaError(f"GCPGPU_SECRETS: {env!r} is not an environment variable name", EXIT_BAD_INPUT)
        if not isinstance(name, str) or not _SECRET.match(name):
            raise ReplicaError(f"GCPGPU_SECRETS: {env}: {name!r} is not projects/P/secrets/NAME[/versions/V]",
                              EXIT_BAD_INPUT)
        out[env] = name if "/versions/" in name else f"{name}/versions/latest"
    return out


def _token(metadata: Metadata, endpoint: str, env: str, name: str) -> str | None:
    text = metadata.get(TOKEN_PATH)
    if text:
        try:
            return json.loads(text)["access_token"]
        except (ValueError, KeyError, TypeError):
            pass
    if endpoint.rstrip("/") == SECRETMANAGER_URL:
        raise ReplicaError(f"secret {env} ({name}): no access token: the metadata server gave none for the job's "
                          "service account")
    return None  # another endpoint (the emulator) that needs none


def access_secret(env: str, name: str, endpoint: str, token: str | None, attempts: int = 3) -> bytes:
    """One secret version's payload through Secret Manager's REST `access` call. Errors name the variable
    and the secret, never a value."""
    url = f"{endpoint.rstrip('/')}/v1/{name}:access"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    where = f"secret {env} ({name})"
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:  # noqa: S310
                body = json.loads(response.read())
            break
        except urllib.error.HTTPError as e:
            if e.code in _TRANSIENT and attempt + 1 < attempts:
                time.sleep(2 ** attempt)
                continue
            try:
                message = json.loads(e.read())["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = e.reason
            hint = " (the job's service account needs roles/secretmanager.secretAccessor on it)" if e.code == 403 else ""
            raise ReplicaError(f"{where}: {e.code} {' '.join(str(message).split())[:300]}{hint}") from None
        except (OSError, ValueError) as e:
            if attempt + 1 < attempts:
                time.sleep(2 ** attempt)
                continue
            raise ReplicaError(f"{where}: Secret Manager at {endpoint} did not answer ({e})") from None
    try:
        data = base64.b64decode(body["payload"]["data"], validate=True)
    except (KeyError, TypeError, binascii.Error):
        raise ReplicaError(f"{where}: Secret Manager's answer has no payload") from None
    expected = body["payload"].get("dataCrc32c")
    if expected is not None:
        try:
            import google_crc32c  # comes with google-cloud-storage
        except ImportError:
            google_crc32c = None
        if google_crc32c is not None and str(google_crc32c.value(data)) != str(expected):
            raise ReplicaError(f"{where}: the payload arrived damaged (its CRC32C does not match)")
    if b"\0" in data:
        raise ReplicaError(f"{where}: the value holds a NUL byte, which an environment variable cannot", EXIT_BAD_INPUT)
    return data


def secret_env(environ: Mapping[str, str], metadata: Metadata) -> dict[str, str]:
    """{ENV: value} for every secret GCPGPU_SECRETS names (empty when none)."""
    names = secret_names(environ)
    if not names:
        return {}
    endpoint = environ.get("GCPGPU_SECRETMANAGER_URL", "").strip() or SECRETMANAGER_URL
    seam = environ.get("GCPGPU_SECRETMANAGER_TOKEN", "").strip() if endpoint.rstrip("/") != SECRETMANAGER_URL else ""
    token = seam or _token(metadata, endpoint, *next(iter(names.items())))  # one token serves every secret
    return {env: os.fsdecode(access_secret(env, name, endpoint, token)) for env, name in names.items()}


# -- setup, then the command --------------------------------------------------------------------------------


def run_setup(command: str, env: Mapping[str, str], prog: str = "gcpgpu-entrypoint") -> int:
    """`bash -c COMMAND`, its output passed through to ours; its exit status. On a failure, the one line
    that says so and what the setup said last."""
    print(f"{prog}: setup: {command}", file=sys.stderr, flush=True)
    child = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env=dict(env))
    # Stopping the replica (a preempted node, a cancelled job) stops the setup too.
    forward = {s: signal.signal(s, lambda signum, _frame: child.send_signal(signum))
               for s in (signal.SIGTERM, signal.SIGINT)}
    tail = b""
    out = sys.stdout.buffer
    assert child.stdout is not None
    try:
        while chunk := child.stdout.read1(65536):
            out.write(chunk)
            out.flush()
            tail = (tail + chunk)[-8192:]
        code = child.wait()
    finally:
        for s, handler in forward.items():
            signal.signal(s, handler)
    status = 128 - code if code < 0 else code
    if status:
        lines = [line.strip() for line in re.split(rb"[\r\n]", tail) if line.strip()]
        last = lines[-1].decode(errors="replace")[:300] if lines else "(no output)"
        print(f"{prog}: setup failed (exit {status}): {last}", file=sys.stderr, flush=True)
    return status


def run(argv: Sequence[str], environ: Mapping[str, str], metadata: Metadata,
        prog: str = "gcpgpu-entrypoint") -> int:
    """Read the secrets, run the setup, then become the command; returns only on a failure (its exit status)."""
    try:
        secrets = secret_env(environ, metadata)
    except ReplicaError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return e.exit_code
    env = {**environ, **secrets}
    if secrets:
        print(f"{prog}: secrets from Secret Manager: {', '.join(sorted(secrets))}", file=sys.stderr, flush=True)
    setup = environ.get("GCPGPU_SETUP", "").strip()
    if setup:
        status = run_setup(setup, env, prog)
        if status:
            return status
    from gcpgpu.node.launcher_hint import launcher_hint

    hint = launcher_hint(argv, environ)
    if hint:
        print(f"{prog}: note: {hint}", file=sys.stderr, flush=True)
    return run_command(argv, env, prog)

