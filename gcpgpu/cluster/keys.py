"""The ssh key gcpgpu logs in to nodes with, and its place in the project's `ssh-keys` metadata.

As `gcloud compute ssh` does: a key pair under ~/.ssh (made once with ssh-keygen, no passphrase), its
public half added to the project's commonInstanceMetadata `ssh-keys` as `USER:TYPE KEY USER`, which
Google's guest agent on every node turns into an account with that key (the emulator's nodes read the
same item). On Google Cloud the key is gcloud's own (~/.ssh/google_compute_engine), so gcloud and gcpgpu
share one; against the emulator it is ~/.ssh/gcpgpu_emulator, so an emulator never holds the key that
reaches real nodes. The private key never leaves this machine and is never printed; the public half
goes to metadata only. A project with OS Login on ignores metadata keys: use `gcloud compute ssh` there.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients

KEY_ITEM = "ssh-keys"


def ssh_dir() -> Path:
    return Path(os.path.expanduser("~")) / ".ssh"


def key_file(emulated: bool) -> Path:
    return ssh_dir() / ("gcpgpu_emulator" if emulated else "google_compute_engine")


def known_hosts(emulated: bool) -> Path:
    return ssh_dir() / ("gcpgpu_emulator_known_hosts" if emulated else "google_compute_known_hosts")


def login_user() -> str:
    """The node account: this machine's user name as a Linux name (gcloud's rule); `gcpgpu` for root or
    a name that cannot be one (nodes refuse root logins)."""
    try:
        name = getpass.getuser()
    except Exception:
        name = ""
    name = re.sub(r"[^a-z0-9_.-]", "_", name.lower())[:32]
    return name if re.fullmatch(r"[a-z_][a-z0-9_.-]*", name) and name != "root" else "gcpgpu"


def ensure_key(emulated: bool) -> Path:
    """The private key's path, the pair made first when missing."""
    path = key_file(emulated)
    if path.exists() and path.with_suffix(".pub").exists():
        return path
    if shutil.which("ssh-keygen") is None:
        raise UsageProblem("ssh-keygen is not installed: install OpenSSH's client (apt-get install openssh-client)")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    done = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", login_user(), "-f", str(path)],
                          capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise CloudError(f"ssh-keygen could not make {path}: {(done.stderr or done.stdout).strip()[:200]}")
    return path


def public_line(path: Path, user: str) -> str:
    """`USER:TYPE KEY USER`, the metadata line for `path`'s public half."""
    words = path.with_suffix(".pub").read_text().split()
    if len(words) < 2:
        raise UsageProblem(f"{path}.pub is not an OpenSSH public key")
    return f"{user}:{words[0]} {words[1]} {user}"


def ensure_in_metadata(clients: Clients, project: str, line: str) -> bool:
    """Add `line` to the project's `ssh-keys` unless a line with its key is there; True when it added it."""
    from gcpgpu.gcp.compute import compute_types
    from gcpgpu.gcp.operations import call, retrying, wait

    compute = compute_types()
    projects = clients.compute("ProjectsClient")
    key = line.split(":", 1)[1].split()[1]
    for _ in range(20):
        md = retrying()(projects.get)(project=project).common_instance_metadata
        items = [{"key": i.key, "value": i.value} for i in md.items]
        mine = next((i for i in items if i["key"] == KEY_ITEM), None)
        current = (mine or {}).get("value") or ""
        if any(len(w := entry.split()) >= 2 and w[1] == key and entry.startswith(line.split(":", 1)[0] + ":")
               for entry in current.splitlines()):
            return False
        value = (current.rstrip("\n") + "\n" + line).lstrip("\n")
        rest = [i for i in items if i["key"] != KEY_ITEM] + [{"key": KEY_ITEM, "value": value}]
        body = compute.Metadata(fingerprint=md.fingerprint, items=[compute.Items(**i) for i in rest])
        try:
            op = call(projects.set_common_instance_metadata, {"project": project, "metadata_resource": body})
            wait(clients, project, op)
            return True
        except Exception as e:
            if "CONDITION_NOT_MET" not in str(e) and getattr(e, "code", None) != 412:
                raise
        time.sleep(0.05)
    raise CloudError(f"could not add the ssh key to project {project}'s metadata: it keeps changing")
