"""Two wire shapes Compute checks on every write: resource references and fingerprints.

A reference to another resource (a NIC's network, a subnetwork, a firewall's network) is a full URL
or a partial path (projects/P/global/networks/N, global/networks/N), as the API reference lists
them; anything else is refused with the 400 Compute gives, "Invalid value for field '...': '...'.
The URL is malformed." (quoted in hashicorp/terraform#3226 and GoogleCloudPlatform/cloud-image-tests#537),
rather than read by its last segment. A bare name is still taken, as the emulator always has (the
real API's answer to one has varied: terraform#3226 saw 'default' taken and other names refused).

Fingerprints are `format: byte` fields: Compute writes them in base64 with the URL-safe alphabet
(RFC 4648 section 5, padded; real responses captured in apache/libcloud's GCE fixtures read e.g.
"IZjMMp0A_8k=" and "5qm-QyYGyzw=", none has '+' or '/'), and gcloud (apitools) decodes whatever it
reads and sends it back URL-safe. A fingerprint is therefore compared as the bytes it stands for,
whichever alphabet the caller wrote it in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

from ..core import invalid, not_found

# Any host: clients aimed at the emulator (gcloud's api_endpoint_overrides) write its own address.
_API = r"(?:https?://[A-Za-z0-9.-]+(?::\d{1,5})?/compute/(?:v1|beta|alpha)/)"
_PROJECT = r"(?:(?:[a-z][a-z0-9.-]*:)?[a-z][-a-z0-9]{1,61}[a-z0-9]|\d{1,19})"
_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_REGION = r"[a-z]+(?:-[a-z]+)*\d+"


def _pattern(scope: str, kind: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:(?:{_API}?projects/{_PROJECT}/)?{scope}/{kind}/({_NAME})|({_NAME}))$")


_GLOBAL = {kind: _pattern("global", kind) for kind in ("networks", "firewalls", "instanceTemplates")}
_REGIONAL = {kind: re.compile(rf"^(?:(?:{_API}?projects/{_PROJECT}/)?regions/({_REGION})/{kind}/({_NAME})|({_NAME}))$")
             for kind in ("subnetworks", "resourcePolicies", "instanceTemplates")}


def global_name(link: Any, kind: str, field: str) -> str:
    """The name a reference to a global `kind` resource (networks, ...) names; 400 if it is malformed."""
    m = _GLOBAL[kind].match(link) if isinstance(link, str) else None
    if m is None:
        raise invalid(field, link, "The URL is malformed.")
    return m.group(1) or m.group(2)


def network(p: Any, link: Any, field: str = "resource.network") -> dict:
    """The network a reference names in project `p`: 400 if the reference is malformed, 404 if it is not there."""
    name = global_name(link, "networks", field)
    net = p.coll("global/networks").get(name)
    if net is None:
        raise not_found(f"projects/{p.name}/global/networks/{name}")
    return net


def regional_name(link: Any, kind: str, field: str, region: str) -> tuple[str, str]:
    """(region, name) of a reference to a regional `kind` resource; a bare name is in `region`."""
    m = _REGIONAL[kind].match(link) if isinstance(link, str) else None
    if m is None:
        raise invalid(field, link, "The URL is malformed.")
    return (m.group(1), m.group(2)) if m.group(2) else (region, m.group(3))


def fingerprint(value: Any) -> str:
    """A content fingerprint as Compute writes one: 8 bytes of a hash, base64 with the URL-safe alphabet."""
    raw = json.dumps(value, sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:8]).decode()


def _fingerprint_bytes(text: Any) -> bytes | None:
    if not isinstance(text, str) or not text:
        return None
    text = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def same_fingerprint(given: Any, current: str) -> bool:
    """Whether the caller's fingerprint is the current one, in either base64 alphabet, padded or not."""
    got = _fingerprint_bytes(given)
    return got is not None and got == _fingerprint_bytes(current)
