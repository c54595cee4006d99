"""`cluster ssh-config NAME [--write]`: one `Host NAME-RANK` entry per node, for plain ssh and editors.

Each entry carries the options nodessh.Reach gives (user, gcpgpu's key, the node's pinned host key,
the ProxyCommand through IAP), so `ssh NAME-0`, `scp`, `rsync -e ssh` and an editor's remote mode (VS
Code's Remote-SSH and the like) reach the node with nothing else set up. `--write` keeps them in
~/.ssh/config between two marker lines of their own, one pair per cluster and project: a second write
replaces what is between them (and leaves the file as it was when nothing changed), `cluster down`
removes them, and nothing outside the markers is ever changed (appended at the end the first time, as
`gcloud compute config-ssh` does). The file is rewritten whole through a temporary file beside it, mode
0600, so a crash leaves the old or the new file, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .keys import ssh_dir
from .nodessh import Reach
from .observe import Node


def config_path() -> Path:
    return ssh_dir() / "config"


def markers(cluster: str, project: str) -> tuple[str, str]:
    what = f"gcpgpu cluster {cluster} (project {project})"
    return f"# >>> {what}: written by 'gcpgpu cluster ssh-config --write' >>>", f"# <<< {what} <<<"


def entries(reach: Reach, cluster: str, nodes: list[Node]) -> str:
    """The Host entries of `nodes`, one per rank (alias CLUSTER-RANK)."""
    blocks = []
    for node in nodes:
        lines = [f"Host {cluster}-{node.rank}"]
        for keyword, value in reach.options(node):
            lines.append(f"    {keyword} {_quoted(value) if keyword != 'ProxyCommand' else value}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _quoted(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _without(text: str, begin: str, end: str) -> tuple[str, int | None]:
    """`text` less the lines from `begin` to `end` (both markers included), and where they stood."""
    lines = text.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == begin)
        stop = next(i for i in range(start, len(lines)) if lines[i].rstrip("\n") == end)
    except StopIteration:
        return text, None
    return "".join(lines[:start] + lines[stop + 1:]), start


def write(cluster: str, project: str, body: str) -> bool:
    """Put `body` between the cluster's markers in ~/.ssh/config; True when the file changed."""
    path = config_path()
    old = path.read_text() if path.exists() else ""
    begin, end = markers(cluster, project)
    rest, at = _without(old, begin, end)
    block = f"{begin}\n{body}{end}\n"
    if at is None:
        new = rest + ("" if not rest or rest.endswith("\n\n") else "\n" if rest.endswith("\n") else "\n\n") + block
    else:
        lines = rest.splitlines(keepends=True)
        new = "".join(lines[:at]) + block + "".join(lines[at:])
    if new == old:
        return False
    _replace(path, new)
    return True


def remove(cluster: str, project: str) -> bool:
    """Take the cluster's entries (and markers) out of ~/.ssh/config; True when there were some."""
    path = config_path()
    if not path.exists():
        return False
    old = path.read_text()
    new, at = _without(old, *markers(cluster, project))
    if at is None:
        return False
    if at > 0:  # the blank line `write` put before the block goes with it
        lines = new.splitlines(keepends=True)
        if at <= len(lines) and lines[at - 1] == "\n":
            new = "".join(lines[:at - 1] + lines[at:])
    _replace(path, new)
    return True


def _replace(path: Path, text: str) -> None:
    path = path.resolve()  # a config kept elsewhere and linked (a dotfiles folder) stays a link
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=".config.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
