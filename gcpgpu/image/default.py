"""The image a job runs when it names none: the one `gcpgpu container build` last pushed for its project,
region and GPUDirect flavour; never a tag that nothing built.

Found in this order:
  1. this machine's record: `container build` writes each image it pushed to
     $XDG_STATE_HOME/gcpgpu/images.json (default ~/.local/state/gcpgpu/images.json), keyed by project,
     region and flavour, and a `--context DIR` image also by DIR. A state file, not configuration: it is
     what the tool last did, which the XDG spec puts under XDG_STATE_HOME, not XDG_CONFIG_HOME. The
     emulator's builds go to $XDG_CACHE_HOME/gcpgpu/emulator-images.json instead, so they never stand in
     for Google's.
     A `--context DIR` image is the default only for jobs from DIR: a job whose --workdir is DIR, or,
     without --workdir, one submitted from DIR (the current folder). Every other job keeps the gcpgpu
     image (the last `container build` without --context), so building one project's code into an
     image never changes what an unrelated job runs.
  2. on another machine, at submit: Artifact Registry's dockerImages.list on REGION-docker.pkg.dev/
     PROJECT/gcpgpu, the most recently uploaded gcpgpu-trainer image with a FLAVOR-* tag (the tags
     `container build` gives), --context images (FLAVOR-ctx-*) left out; a custom --tag is found only
     through the record.
  3. neither: one line saying to run `gcpgpu container build` or to pass --image.
`--dry-run` looks the same way (the registry's list is a read; nothing changes), so its image is the one
submit will run; when the registry cannot be read from here it says so and where submit will look.
The nodes' follower (autostop, a detached job) runs from the gcpgpu image found the same way
(image/follower.py; it reads only the record with --dry-run), and `cluster up` has its nodes pull that
image while they boot (fill_prepull), so the first job finds it there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem

from .name import DEFAULT_REPO, IMAGE_NAME, image_path, repository


def state_file(emulated: bool | str | None = False, environ: Mapping[str, str] | None = None) -> Path:
    """Where the record lives: XDG_STATE_HOME for Google; for the emulator, XDG_CACHE_HOME, beside the
    emulator's own gcloud configuration (its builds are disposable, and nothing run against the emulator
    changes the user's state)."""
    env = os.environ if environ is None else environ
    var, default, name = (("XDG_CACHE_HOME", "~/.cache", "emulator-images.json") if emulated
                          else ("XDG_STATE_HOME", "~/.local/state", "images.json"))
    base = env.get(var, "").strip()
    root = Path(base) if base and os.path.isabs(base) else Path(default).expanduser()
    return root / "gcpgpu" / name


CONTEXT_KEY = " context "  # between the flavour's key and a --context image's folder (no tag holds a space)
CONTEXT_TAG = "-ctx-"  # in the tags container build gives --context images (user_layer.tag)


def _key(emulated: bool | str | None, project: str, region: str, flavor: str, context: str | None = None) -> str:
    # The emulator's projects may share names with real ones: its builds never stand in for Google's. Given as
    # its address, an emulator's builds are its own: another emulator (a fresh one on another port) has none
    # of them, so neither its default image nor a --context note follows there.
    where = f"emulator@{emulated}" if isinstance(emulated, str) else "emulator" if emulated else "google"
    key = f"{where}/{project}/{region}/{flavor}"
    return key if context is None else f"{key}{CONTEXT_KEY}{folder_key(context)}"


def folder_key(folder: str | os.PathLike[str]) -> str:
    """A folder as the record names it: absolute, links resolved, so `mycode` and `./mycode/` are one."""
    return os.path.realpath(os.fspath(folder))


def _read(emulated: bool | str | None) -> dict[str, Any]:
    try:
        data = json.loads(state_file(emulated).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no record yet, or one this version cannot read: the registry still answers
    return data if isinstance(data, dict) else {}


def remember(*, emulated: bool | str | None, project: str, region: str, flavor: str, image: str,
             context: str | os.PathLike[str] | None = None) -> None:
    """Record the image `container build` pushed, so the next `job submit` there runs it; with `context`
    (its --context folder), only the next jobs from that folder."""
    path = state_file(emulated)
    data = _read(emulated)
    data[_key(emulated, project, region, flavor, None if context is None else os.fspath(context))] = image
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # atomic: two builds at once leave one whole file
    except OSError:
        pass  # a read-only home: submit then asks the registry, which holds the image anyway


def remembered(*, emulated: bool | str | None, project: str, region: str, flavor: str,
               context: str | os.PathLike[str] | None = None) -> str | None:
    """The image recorded for the flavour (with `context`: for jobs from that folder), None if none."""
    image = _read(emulated).get(_key(emulated, project, region, flavor, None if context is None
                                     else os.fspath(context)))
    return image if isinstance(image, str) and image else None


def context_folders(*, emulated: bool | str | None, project: str, region: str, flavor: str) -> list[str]:
    """The folders this machine built --context images from for the flavour (the record's)."""
    prefix = _key(emulated, project, region, flavor) + CONTEXT_KEY
    return sorted(k[len(prefix):] for k in _read(emulated) if k.startswith(prefix))


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
            if tag.startswith(f"{flavor}-") and CONTEXT_TAG not in tag:  # another project's code: never a default
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


def resolve(settings: Any, *, region: str, flavor: str, dry_run: bool, say: Any, origin: str | None = None) -> str:
    """The default image for a job in `region` needing `flavor`, from folder `origin` (its --workdir, else
    where it was submitted from); says on stderr where it came from (--dry-run too: it reads, as submit)."""
    project = settings.project
    emulated = settings.emulator  # its address: an emulator's builds are its own (_key)
    if origin is not None:
        mine = remembered(emulated=emulated, project=project, region=region, flavor=flavor, context=origin)
        if mine:
            say(f"image: {mine} (the last 'gcpgpu container build --context {folder_key(origin)}' here for {region}, "
                f"flavour {flavor}: this job is from that folder)")
            return mine
        others = [f for f in context_folders(emulated=emulated, project=project, region=region, flavor=flavor)
                  if f != folder_key(origin)]
        if len(others) == 1:
            say(f"note: the --context image of {others[0]} runs only jobs from that folder (submitted there, or "
                f"with --workdir {others[0]}); this job gets the gcpgpu image")
        elif others:
            say(f"note: the --context images of {', '.join(others)} run only jobs from their own folders (submitted "
                "there, or with that --workdir); this job gets the gcpgpu image")
    found = remembered(emulated=emulated, project=project, region=region, flavor=flavor)
    if found:
        say(f"image: {found} (the last 'gcpgpu container build' here for {region}, flavour {flavor})")
        return found
    where = image_path(project, region)
    try:
        found = newest_in_registry(settings.clients, project, region, flavor)
    except Exception as e:  # --dry-run only (below): no credentials here, no permission, no network
        if not dry_run:
            raise
        why = e.message if isinstance(e, CloudError) else f"{type(e).__name__}: {e}"
        say(f"image: cannot list Artifact Registry {where} from here ({why}); submit will run its newest "
            f"{flavor}-* image, or stop in one line if it has none")
        return f"{where}:{flavor}-*"
    if not found:
        problem = (f"no gcpgpu image for flavour {flavor} in {repository(project, region)}: run "
                   f"'gcpgpu container build --flavor {flavor}' (add --context DIR for your code), or pass --image URI")
        if not dry_run:
            raise UsageProblem(problem)
        say(f"image: {problem}; submit will stop here")
        return f"{where}:{flavor}-*"
    say(f"image: {found} (the newest {flavor}-* image in Artifact Registry)")
    return found


def fill_prepull(settings: Any, spec: Any, *, dry_run: bool, say: Any) -> None:
    """Give a ClusterSpec the image its nodes pull while they boot: --prepull stands ("none": nothing);
    else the follower's image, or the gcpgpu image jobs get by default (a plan or --dry-run reads only the
    record). None found: no pull ahead, one line, and each job pulls its image as it starts."""
    if spec.prepull is not None:
        return
    from gcpgpu import catalog

    region = str(spec.region)
    flavor = catalog.get_machine_type(spec.machine_type).gpudirect
    found = spec.agent_image or remembered(emulated=settings.emulator, project=settings.project,
                                           region=region, flavor=flavor)
    if found is None and not dry_run:
        try:
            found = newest_in_registry(settings.clients, settings.project, region, flavor)
        except CloudError as e:
            say(f"note: cannot list Artifact Registry {image_path(settings.project, region)} ({e.message}): "
                "the nodes pull no image ahead of the jobs")
            return
    if found is None:
        if not dry_run:
            say(f"note: no gcpgpu {flavor}-* image in {repository(settings.project, region)} to pull ahead of the "
                "jobs (each job pulls its image as it starts; --prepull IMAGE names one)")
        return
    spec.prepull = found
