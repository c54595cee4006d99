"""Where the top-level templates/ and containers/ are (installed or in a checkout), and rendering."""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path
from typing import Any

_PKG = Path(__file__).resolve().parent


def bundled_dir(name: str) -> Path:
    """templates/ or containers/: inside the wheel (gcpgpu/_bundled/NAME) or at the repo's top."""
    for candidate in (_PKG / "_bundled" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gcpgpu's {name}/ directory is missing from this installation")


def templates_dir() -> Path:
    return bundled_dir("templates")


def containers_dir() -> Path:
    return bundled_dir("containers")


@cache
def image_versions() -> dict[str, str]:
    """containers/versions.env: the PyTorch/torchao/CUDA pairing the image and the tests share."""
    out = {}
    for line in (containers_dir() / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@cache
def _env() -> Any:
    import jinja2

    # StrictUndefined: a template that names a missing value fails loudly instead of rendering "".
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # Every user string that reaches a shell goes through `shquote`.
    env.filters["shquote"] = lambda v: shlex.quote(str(v))
    env.filters["tojson_compact"] = lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True)
    return env


def render(template: str, **context: Any) -> str:
    """Render templates/TEMPLATE with `context`."""
    return _env().get_template(template).render(**context)


def node_file(name: str) -> str:
    """The text of a node-side program the startup script writes onto a node as a file (gcpgpu/node/NAME):
    read as data, never imported, since nothing on the laptop's side imports the node's room."""
    return (_PKG / "node" / name).read_text()
