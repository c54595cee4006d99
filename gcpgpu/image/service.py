"""`gcpgpu container build` as one call: check the request, choose where to build, build, push, remember.

The steps (build.py holds each one's mechanics):
  1. check every option (one line each, before any request);
  2. pick the files: gcpgpu's own sources, and with --context the user's folder on top (user_layer.py);
  3. pick the builder: the local Docker engine or Cloud Build (the emulator stands in for Cloud Build);
  4. with --context on Cloud Build, ask the registry whether the base image is there already;
  5. build (or, with --dry-run, return what would run), then remember the pushed image for `job submit`
     (default.py): a --context image for the jobs from that folder only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem

from . import build as images
from . import default as default_image
from . import user_layer
from .name import DEFAULT_REPO, image_uri


@dataclass(frozen=True)
class BuildRequest:
    """What the user asked `container build` for (the CLI's options, unchecked)."""

    flavor: str = "auto"
    machine_type: str | None = None
    tag: str | None = None
    repo: str = DEFAULT_REPO
    local: bool | None = None  # None: local when a Docker engine answers (and no emulator)
    staging_dir: str | None = None
    context_dir: str | None = None
    requirements: str | None = None
    push: bool = True
    dry_run: bool = False


@dataclass
class Built:
    """What a build did: `result` when it ran; with --dry-run, the docker command lines or the Cloud Build
    request it would have sent (and nothing else happened)."""

    result: dict[str, Any] | None = None
    commands: list[list[str]] = field(default_factory=list)
    request: dict[str, Any] | None = None


def build_image(settings: Any, req: BuildRequest, say: Callable[[str], None]) -> Built:
    """Build the training image as `req` asks; progress and notes go to `say` line by line."""
    flavor, _ = images.resolve_flavor(req.flavor, req.machine_type)
    images.check_repo(req.repo)
    if req.tag is not None:
        images.check_tag(req.tag)
    staging = images.parse_staging(req.staging_dir) if req.staging_dir else None
    local, emulated = req.local, settings.emulator is not None
    if not req.push and local is False:
        raise UsageProblem("--no-push applies to --local builds only; Cloud Build always pushes its images")
    if local and emulated and req.push and not req.dry_run:
        # The emulator has no registry: `docker push` would reach the real Artifact Registry.
        raise UsageProblem("--local against the emulator: the push would go to the real Artifact Registry; "
                           "add --no-push to build here only, or drop --local (the emulator stands in for Cloud Build)")
    if req.requirements is not None and req.context_dir is None:
        raise UsageProblem("--requirements goes with --context DIR (the code the requirements are for)")
    user = None
    if req.context_dir is not None:
        user = user_layer.prepare(req.context_dir, req.requirements)
    project, region = settings.project, settings.region

    files = images.context_files(images.sources())
    digest = images.source_digest(files)
    base_tag = f"{flavor}-{digest[:12]}"
    image = image_uri(project, region, base_tag if user is not None else req.tag or base_tag, req.repo)
    user_image = None
    if user is not None:
        user_image = image_uri(project, region, req.tag or user_layer.tag(flavor, digest, user), req.repo)
        files = files + user.all_files()
        say(f"--context {user.root}: {len(user.files)} files ({user.packed_bytes / 2**20:.1f} MiB packed)"
            + (f", pip install -r {user.requirements}" if user.requirements else ", no requirements file")
            + f"; FROM {image}")
    if local is None:
        if emulated:
            local = False  # the emulator stands in for Cloud Build; a local engine is not emulated
        else:
            local, found = images.docker_engine()
            say(f"{found}: building {'here with docker' if local else 'with Cloud Build'}.")
    elif local:
        reachable, found = images.docker_engine()
        if not reachable and not req.dry_run:
            raise UsageProblem(f"--local needs a Docker engine, but {found}; use --cloud-build instead")

    build_base = True
    if user is not None and not local and not req.dry_run:
        # Cloud Build starts from an empty Docker: pulling the base costs far less than building it again.
        try:
            held = default_image.registry_images(settings.clients, project, region, req.repo)
        except CloudError as e:  # no permission to list, say: building the base too still works
            say(f"(cannot list the registry: {e.message})")
            held = None
        build_base = not default_image.has_tag(held, base_tag)
        say(f"Base {image}: " + ("building it too (not in the registry yet)" if build_base
                                 else "in the registry already; the build pulls it"))
    config = images.render_cloudbuild(image, flavor, region, user_image=user_image, build_base=build_base)
    extra = {"cloudbuild.yaml": config, **(user.extra(image) if user else {})}
    context = images.build_context(files, extra)
    say(f"Context: {len(context.files)} files, {len(context.data) / 1024:.0f} KiB, sources {digest[:12]}")
    pushed = user_image or image

    if local:
        commands = images.docker_commands(image, flavor, push=req.push, user_image=user_image)
        if req.dry_run:
            return Built(commands=commands)
        images.run_local(commands, context, say)
        if req.push:
            _remember(settings, region, flavor, pushed, user)
        return Built({"image": pushed, "flavor": flavor, "built": "local", "pushed": req.push,
                      **({"base": image} if user_image else {})})

    bucket, prefix = staging or (f"{project.replace(':', '_')}_cloudbuild", "source")
    # The sources' digest names gcpgpu's own context; a --context one is named by its bytes.
    name = f"gcpgpu-{digest[:16]}" if user is None else f"gcpgpu-ctx-{hashlib.sha256(context.data).hexdigest()[:16]}"
    obj = f"{prefix}/{name}.tgz".lstrip("/")
    request = images.build_request(project, region, config, bucket, obj)
    if req.dry_run:
        if user is not None:
            say("The 'build' step (the base image) is left out when the registry holds it already.")
        return Built(request=request)

    clients = settings.clients
    say(f"Uploading the context to gs://{bucket}/{obj}" + (" (held by the emulator)" if clients.is_emulated else ""))
    images.upload_source(clients, bucket, obj, context.data, create_bucket=staging is None)

    # The build's logUrl is a Cloud Console page: on the emulator it leads nowhere, so say where it ran instead
    # (its log follows here line by line either way).
    def log_at(b: dict) -> str:
        return f"on the emulator at {clients.emulator}, no console page" if clients.is_emulated \
            else f"log: {b.get('logUrl', '-')}"

    def on_status(b: dict) -> None:
        if b["status"] == "QUEUED":
            say(f"Build {b['id']} queued in {region}; {log_at(b)}")
        else:
            say(f"Build {b['id']}: {b['status']}")

    final = images.submit(clients, request, on_status=on_status, on_log=say,
                          poll_seconds=0.2 if clients.is_emulated else 3.0)
    if final["status"] != "SUCCESS":
        detail = final.get("statusDetail") or (final.get("failureInfo") or {}).get("detail") or ""
        raise CloudError(f"Cloud Build {final['id']} ended {final['status']}" + (f": {detail}" if detail else "")
                         + f" ({log_at(final)})")
    built = (final.get("results", {}).get("images") or [{}])[-1]
    _remember(settings, region, flavor, pushed, user)
    return Built({"image": pushed, **({"base": image} if user_image else {}), "digest": built.get("digest"),
                  "flavor": flavor, "built": "cloud-build", "build_id": final["id"], "log_url": None if clients.is_emulated else final.get("logUrl"),
                  "emulated": clients.is_emulated})


def _remember(settings: Any, region: str, flavor: str, image: str, user: user_layer.UserContext | None) -> None:
    """The next jobs' default image: a --context image only for jobs from its folder (default.py)."""
    default_image.remember(emulated=settings.emulator, project=settings.project, region=region,
                           flavor=flavor, image=image, context=None if user is None else user.root)
