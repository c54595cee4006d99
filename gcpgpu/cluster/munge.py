"""A Slurm cluster's munge key: made by `cluster up --scheduler slurm`, kept in Secret Manager, deleted by `down`.

munge authenticates every message between Slurm's daemons and commands, with one key shared by the
cluster's nodes. It is a secret: it lives only in Secret Manager (secret gcpgpu-munge-CLUSTER, labelled
with the cluster), and the nodes' service account reads it there (gcpgpu/slurm/node.py). Instance
metadata names the secret, never the key; no log, template or plan shows it.
"""

from __future__ import annotations

import base64
import secrets

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

from .names import LABEL_CLUSTER, LABEL_MANAGED

KEY_BYTES = 1024  # what mungekey makes by default


PREFIX = "gcpgpu-munge-"  # no job may name one as its --secret (gcpgpu/jobs/usercode.py)


def secret_id(cluster: str) -> str:
    return f"{PREFIX}{cluster}"


def secret_name(project: str, cluster: str) -> str:
    return f"projects/{project}/secrets/{secret_id(cluster)}"


def _fail(what: str, response: object) -> CloudError:
    try:
        message = response.json()["error"]["message"]  # type: ignore[attr-defined]
    except (ValueError, KeyError, TypeError):
        message = getattr(response, "reason", "")
    return CloudError(f"{what}: Secret Manager said {getattr(response, 'status_code', '?')} {message}")


ACCESSOR = "roles/secretmanager.secretAccessor"


def ensure_key(clients: Clients, project: str, cluster: str, service_account: str | None = None) -> bool:
    """Make the cluster's munge key unless it has one; True when it was made now. With the nodes' own
    `service_account` (`--service-account`), that account alone is given access on this secret, so a
    cluster's nodes (and what runs on them) need no project-wide Secret Manager role to read it."""
    session, base = clients.secretmanager_session()
    url = f"{base}/v1/projects/{project}/secrets"
    got = session.get(f"{url}/{secret_id(cluster)}/versions/latest", timeout=30)
    if got.status_code == 200:
        _grant(session, url, cluster, service_account)
        return False
    if got.status_code != 404:
        raise _fail(f"reading the munge key of cluster {cluster}", got)
    made = session.post(url, params={"secretId": secret_id(cluster)}, timeout=30, json={
        "replication": {"automatic": {}}, "labels": {LABEL_CLUSTER: cluster, LABEL_MANAGED: "true"}})
    if made.status_code not in (200, 409):  # 409: made by an earlier `up`, which stopped before its version
        raise _fail(f"making the munge key of cluster {cluster}", made)
    key = base64.b64encode(secrets.token_bytes(KEY_BYTES))  # text: a key has NUL bytes, a payload is read as text
    added = session.post(f"{url}/{secret_id(cluster)}:addVersion", timeout=30,
                         json={"payload": {"data": base64.b64encode(key).decode()}})
    if added.status_code != 200:
        raise _fail(f"storing the munge key of cluster {cluster}", added)
    _grant(session, url, cluster, service_account)
    return True


def _grant(session: object, url: str, cluster: str, service_account: str | None) -> None:
    """The key's policy: read by the cluster's own service account and no other (none given: left as it is)."""
    if not service_account or service_account == "default":
        return
    policy = {"bindings": [{"role": ACCESSOR, "members": [f"serviceAccount:{service_account}"]}]}
    done = session.post(f"{url}/{secret_id(cluster)}:setIamPolicy", json={"policy": policy}, timeout=30)  # type: ignore[attr-defined]
    if done.status_code != 200:
        raise _fail(f"giving the nodes of cluster {cluster} access to its munge key", done)


def delete_key(clients: Clients, project: str, cluster: str) -> bool:
    """Delete the cluster's munge key if there is one; True when it was there."""
    session, base = clients.secretmanager_session()
    gone = session.delete(f"{base}/v1/projects/{project}/secrets/{secret_id(cluster)}", timeout=30)
    if gone.status_code == 404:
        return False
    if gone.status_code != 200:
        raise _fail(f"deleting the munge key of cluster {cluster}", gone)
    return True
