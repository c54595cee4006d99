"""The image a job runs when it names none: the one `gcpgpu container build` last pushed for its project,
region and GPUDirect flavour; never a tag that nothing built.

Found in this order:
  1. this machine's record: `container build` writes each image it pushed to
     $XDG_STATE_HOME/gcpgpu/images.json (default ~/.local/state/gcpgpu/images.json), keyed by project,
     region and flavour. A state file, not configuration: it is what the tool last did, which the XDG
     spec puts under XDG_STATE_HOME, not XDG_CONFIG_HOME. The emulator's builds go to
     $XDG_CACHE_HOME/gcpgpu/emulator-images.json instead, so they never stand in for Google's.
  2. on another machine, at submit: Artifact Registry's dockerImages.list on REGION-docker.pkg.dev/
     PROJECT/gcpgpu, the most recently uploaded gcpgpu-trainer image with a FLAVOR-* tag (the tags
     `container build` gives; a custom --tag is found only through the record).
  3. neither: one line saying to run `gcpgpu container build` or to pass --image.
`--dry-run` reads only the record (it makes no request) and otherwise says where submit will look.
The nodes' follower (autostop, a detached job) runs from the image found the same way (follower_image).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem

from .name import DEFAULT_REPO, IMAGE_NAME, image_path, repository


def state_file(emulated: bool = False, environ: Mapping[str, str] | None = None) -> Path:
    """Where the record lives: XDG_STATE_HOME for Google; for the emulator, XDG_CACHE_HOME, beside the
    emulator's own gcloud configuration (its builds are disposable, and nothing run against the emulator
    changes the user's state)."""
    env = os.environ if environ is None else environ
    var, default, name = (("XDG_CACHE_HOME", "~/.cache", "emulator-images.json") if emulated
                          else ("XDG_STATE_HOME", "~/.local/state", "images.json"))
    base = env.get(var, "").strip()
    root = Path(base) if base and os.path.isabs(base) else Path(default).expanduser()
    return root / "gcpgpu" / name


def _key(emulated: bool, project: str, region: str, flavor: str) -> str:
    # The emulator's projects may share names with real ones: its builds never stand in for Google's.
    return f"{'emulator' if emulated else 'google'}/{project}/{region}/{flavor}"


def _read(emulated: bool) -> dict[str, Any]:
    try:
        data = json.loads(state_file(emulated).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no record yet, or one this version cannot read: the registry still answers
    return data if isinstance(data, dict) else {}


def remember(*, emulated: bool, project: str, region: str, flavor: str, image: str) -> None:
    """Record the image `container build` pushed, so the next `job submit` there runs it."""
    path = state_file(emulated)
    data = _read(emulated)
    data[_key(emulated, project, region, flavor)] = image
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # atomic: two builds at once leave one whole file
    except OSError:
        pass  # a read-only home: submit then asks the registry, which holds the image anyway


def remembered(*, emulated: bool, project: str, region: str, flavor: str) -> str | None:
    image = _read(emulated).get(_key(emulated, project, region, flavor))
    return image if isinstance(image, str) and image else None


def registry_images(clients: Any, project: str, region: str, repo: str = DEFAULT_REPO) -> list[dict[str, Any]] | None:
    """Artifact Registry's dockerImages.list of REGION-docker.pkg.dev/PROJECT/REPO (every page), or None
    when there is no such repository."""
    session, base = _session(clients)
    url = f"{base}/v1/projects/{project}/locations/{region}/repositories/{repo}/dockerImages"
    images: list[dict[str, Any]] = []
    token = ""
    while True:
        answer = session.get(url, params={"pageSize": 1000, **({"pageToken": token} if token else {})}, timeout=60)
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            try:
                why = answer.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                why = answer.text[:200]
            raise CloudError(f"Artifact Registry {repository(project, region, repo)}: {answer.status_code} {why}")
        data = answer.json()
        images += data.get("dockerImages", [])
        token = data.get("nextPageToken", "")
        if not token:
            return images


def has_tag(images: list[dict[str, Any]] | None, tag: str) -> bool:
    """Whether the listing holds gcpgpu-trainer:TAG."""
    return any(_name(i) == IMAGE_NAME and tag in i.get("tags", []) for i in images or [])


def _name(image: dict[str, Any]) -> str:
    return image.get("uri", "").split("@", 1)[0].rsplit("/", 1)[-1]


def newest_in_registry(clients: Any, project: str, region: str, flavor: str) -> str | None:
    """REGION-docker.pkg.dev/PROJECT/gcpgpu/gcpgpu-trainer:TAG of the newest FLAVOR-* image, or None."""
    best: tuple[str, str] | None = None  # (uploadTime, tag)
    for image in registry_images(clients, project, region) or []:
        if _name(image) != IMAGE_NAME:
            continue
        for tag in image.get("tags", []):
            if tag.startswith(f"{flavor}-"):
                # RFC 3339 in one zone sorts as text; the tag breaks ties for a stable choice.
                best = max(best or ("", ""), (image.get("uploadTime", ""), tag))
    return f"{image_path(project, region)}:{best[1]}" if best else None


def _session(clients: Any) -> tuple[Any, str]:
    if clients.is_emulated:
        import requests

        return requests.Session(), f"http://{clients.emulator}"
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    return AuthorizedSession(credentials), "https://artifactregistry.googleapis.com"


def resolve(settings: Any, *, region: str, flavor: str, dry_run: bool, say: Any) -> str:
    """The default image for a job in `region` needing `flavor`; says on stderr where it came from."""
    project = settings.project
    emulated = settings.emulator is not None
    found = remembered(emulated=emulated, project=project, region=region, flavor=flavor)
    if found:
        say(f"image: {found} (the last 'gcpgpu container build' here for {region}, flavour {flavor})")
        return found
    where = image_path(project, region)
    if dry_run:
        say(f"image: no 'gcpgpu container build' for {region}, flavour {flavor} recorded on this machine; submit "
            f"will run the newest {flavor}-* image in Artifact Registry {where} (none there: it stops and says so)")
        return f"{where}:{flavor}-*"
    found = newest_in_registry(settings.clients, project, region, flavor)
    if not found:
        raise UsageProblem(f"no gcpgpu image for flavour {flavor} in {repository(project, region)}: run "
                           f"'gcpgpu container build --flavor {flavor}' (add --context DIR for your code), or pass "
                           "--image URI")
    say(f"image: {found} (the newest {flavor}-* image in Artifact Registry)")
    return found


def fill(settings: Any, job: Any, region: str, machine: Any, *, dry_run: bool, say: Any) -> None:
    """Give a job submitted without --image its default image (nothing to do when it named one)."""
    if job.image_pending:
        job.image = resolve(settings, region=region, flavor=machine.gpudirect, dry_run=dry_run, say=say)
        job.image_pending = False


def follower_image(settings: Any, region: str, machine_type: str, *, dry_run: bool, say: Any,
                   what: str = "autostop") -> str:
    """The image the nodes' follower runs from: the gcpgpu image `container build` last pushed for the
    cluster's region and GPUDirect flavour (this machine's record, else Artifact Registry's newest
    FLAVOR-* tag); a plan or --dry-run reads only the record (no request). `what` needs the follower
    (autostop, --detach): the one line that says none is built names it."""
    from gcpgpu import catalog

    flavor = catalog.get_machine_type(machine_type).gpudirect
    project = settings.project
    found = remembered(emulated=settings.emulator is not None, project=project, region=region, flavor=flavor)
    where = image_path(project, region)
    if found is None and dry_run:
        say(f"{what}: the nodes' follower will run the newest {flavor}-* image in {where} (looked up then)")
        return f"{where}:{flavor}-*"
    found = found or newest_in_registry(settings.clients, project, region, flavor)
    if not found:
        raise UsageProblem(f"{what} runs on the nodes from gcpgpu's image, and {where} has no {flavor}-* image: "
                           f"run 'gcpgpu container build --region {region} --machine-type {machine_type}' first")
    return found


def fill_follower_image(settings: Any, spec: Any, *, dry_run: bool, say: Any) -> None:
    """Give a ClusterSpec with autostop the image its follower runs from (a spec file's agent_image stands)."""
    if spec.autostop is not None and not spec.agent_image:
        spec.agent_image = follower_image(settings, str(spec.region), spec.machine_type, dry_run=dry_run, say=say)
