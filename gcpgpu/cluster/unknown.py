"""A cluster name that matches nothing: one line that says so, with the names one edit away ("did you mean").

Every command given a cluster by name that finds none (`cluster status tema`, `job submit --cluster tema`,
`job list --cluster tema`, a job id `cluster:tema:x`) says it the same way and exits 1; the clusters it
suggests are those of the project's nodes (one aggregatedList, read only on this path). `cluster down` of a
name that matches nothing exits 0 (idempotent, as terraform destroy), but 1 when a name one edit away
exists: a probable typo.
"""

from __future__ import annotations

from gcpgpu.gcp.clients import Clients

from .names import NoSuchCluster


def one_edit(a: str, b: str) -> bool:
    """Whether `b` is `a` with one character inserted, deleted, replaced, or two neighbours swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    i = next((k for k, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1:]


def nearest(name: str, names: set[str] | list[str]) -> list[str]:
    """The names one edit away from `name`, sorted."""
    return sorted(n for n in set(names) if one_edit(name, n))


def suggestion(clients: Clients, project: str, name: str) -> str:
    """'; did you mean team?' when a cluster of the project is one edit from `name`; else ''."""
    from .observe import project_nodes

    close = nearest(name, {n.cluster for n in project_nodes(clients, project, managed_only=False) if n.cluster})
    return f"; did you mean {' or '.join(close)}?" if close else ""


def missing(clients: Clients, project: str, name: str, after: str = "") -> NoSuchCluster:
    """The error for a cluster name that matches nothing (`after`: what follows from it, e.g. its job)."""
    return NoSuchCluster(project, name, after, suggestion(clients, project, name))
