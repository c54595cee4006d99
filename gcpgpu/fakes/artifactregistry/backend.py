"""Artifact Registry's Docker images, derived from what the emulator's Cloud Build pushed.

No image bytes exist (no build runs), so the registry keeps no state of its own: a repository holds
the images of every build that ended SUCCESS and pushed to LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/,
uploaded when the build finished, in the order the build lists them. A tag pushed again moves to the
newer image, as `docker push` moves it. Each project's `gcpgpu` repository also starts with one
gcpgpu-trainer image per GPUDirect flavour (tag FLAVOR-emulator, older than any build), so a job that
names no image finds one on a fresh emulator as it would in a project where `gcpgpu container build`
ran; set `seeded = False` to see an empty project.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from ..core import ApiError, rfc3339

if TYPE_CHECKING:
    from ..cloudbuild.backend import CloudBuildBackend

SEEDED_REPOSITORY = "gcpgpu"
SEEDED_IMAGE = "gcpgpu-trainer"
SEEDED_FLAVORS = ("none", "tcpx", "tcpxo", "rdma")  # the training image's NCCL plugin flavours
SEEDED_AT = 1735689600.0  # 2025-01-01: before any build the emulator records
MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
_PUSHED = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[^/]+(?:/[^/]+)?)/(?P<repo>[^/]+)/"
                     r"(?P<image>[^:@]+)(?::(?P<tag>[\w][\w.-]{0,127}))?$")


def _not_found() -> ApiError:
    return ApiError(404, "notFound", "Requested entity was not found.")


class ArtifactRegistryBackend:
    def __init__(self, cloudbuild: CloudBuildBackend) -> None:
        self.cloudbuild = cloudbuild
        self.seeded = True

    def reset(self) -> None:
        self.seeded = True

    def docker_images(self, project: str, location: str, repository: str) -> list[dict[str, Any]]:
        """Every image in the repository, oldest first (404 when nothing made the repository)."""
        pushed: list[tuple[float, str, str | None, str]] = []  # (uploaded, image, tag, digest)
        if self.seeded and repository == SEEDED_REPOSITORY:
            for flavor in SEEDED_FLAVORS:
                digest = "sha256:" + hashlib.sha256(f"seed/{project}/{location}/{flavor}".encode()).hexdigest()
                pushed.append((SEEDED_AT, SEEDED_IMAGE, f"{flavor}-emulator", digest))
        builds, token = [], ""
        while True:
            page, token = self.cloudbuild.list(project, f"projects/{project}/locations/{location}", 1000, token)
            builds += page
            if not token:
                break
        for build in builds:
            if build["status"] != "SUCCESS":
                continue
            finished = _seconds(build.get("finishTime", ""))
            for i, result in enumerate(build.get("results", {}).get("images", [])):
                m = _PUSHED.match(result.get("name", ""))
                if not m or m["location"] != location or m["project"].replace("/", ":") != project \
                        or m["repo"] != repository:
                    continue
                # A build pushes its images one after another: the last listed is the newest.
                pushed.append((finished + i * 0.01, m["image"], m["tag"], result["digest"]))
        if not pushed:
            raise _not_found()
        pushed.sort(key=lambda p: p[0])
        images: dict[tuple[str, str], dict[str, Any]] = {}
        for at, name, tag, digest in pushed:
            for other in images.values():
                if other["_name"] == name and tag in other["tags"]:
                    other["tags"].remove(tag)
            entry = images.setdefault((name, digest), {"_name": name, "tags": [], "_at": at})
            if tag and tag not in entry["tags"]:
                entry["tags"].append(tag)
            entry["_at"] = at
        host = f"{location}-docker.pkg.dev/{project.replace(':', '/')}/{repository}"
        out = []
        for (name, digest), entry in sorted(images.items(), key=lambda kv: kv[1]["_at"]):
            out.append({
                "name": f"projects/{project}/locations/{location}/repositories/{repository}/dockerImages/"
                        f"{name.replace('/', '%2F')}@{digest}",
                "uri": f"{host}/{name}@{digest}",
                "tags": entry["tags"],
                "imageSizeBytes": "0",  # nothing was built
                "uploadTime": rfc3339(entry["_at"]),
                "buildTime": rfc3339(entry["_at"]),
                "updateTime": rfc3339(entry["_at"]),
                "mediaType": MEDIA_TYPE,
            })
        return out


def _seconds(stamp: str) -> float:
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
