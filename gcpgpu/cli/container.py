"""`gcpgpu container build`: build the training image locally or with Cloud Build, and push it."""

from __future__ import annotations

import hashlib
import json

import click

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.image import build as images
from gcpgpu.output import current_format, emit, info


@click.group()
def container() -> None:
    """The training image: NGC PyTorch, gcpgpu's trainer, Nsight Systems, NCCL plugin.

    \b
    The image carries the NCCL network plugin of one GPUDirect flavour (none,
    tcpx, tcpxo or rdma); its entrypoint applies the machine's NCCL profile,
    works out the torchrun rendezvous and runs the trainer. See containers/README.md.
    """


@container.command("build")
@click.option(
    "--flavor",
    type=click.Choice(images.FLAVOR_CHOICES),
    default="auto",
    show_default=True,
    help="NCCL plugin to bake in; auto follows --machine-type.",
)
@click.option("--machine-type", "-m", metavar="MT", help="The machine type the image is for, e.g. a3-highgpu-8g.")
@click.option("--tag", metavar="TAG", help="Image tag. Default: FLAVOR-<12 hex of the sources' digest>.")
@click.option(
    "--repo",
    default=images.DEFAULT_REPO,
    show_default=True,
    metavar="REPO",
    help="Artifact Registry Docker repository (it must exist) in the region.",
)
@click.option(
    "--local/--cloud-build",
    "local",
    default=None,
    help="Build with the Docker engine here, or with Cloud Build. Default: local when 'docker info' "
    "reaches an engine (and no --emulator), else Cloud Build.",
)
@click.option(
    "--staging-dir",
    metavar="gs://BUCKET[/PATH]",
    help="Where Cloud Build's source tarball is uploaded. Default: gs://PROJECT_cloudbuild/source, "
    "made if missing (as gcloud does).",
)
@click.option("--context", "context_dir", metavar="DIR",
              help="Your code: build an image FROM the gcpgpu image with DIR at /workdir (packed as job submit "
              "--workdir packs it: .gitignore and .gcpgpuignore apply, 100 MiB at most).")
@click.option("--requirements", metavar="FILE", help="With --context: pip install -r FILE into the image. "
              "Default: DIR/requirements.txt when there is one.")
@click.option("--no-push", is_flag=True, help="Local builds only: tag the image but do not push it.")
@click.option("--dry-run", is_flag=True, help="Print the Cloud Build request (or docker commands); call nothing.")
@click.pass_obj
def build(
    settings,
    flavor: str,
    machine_type: str | None,
    tag: str | None,
    repo: str,
    local: bool | None,
    staging_dir: str | None,
    context_dir: str | None,
    requirements: str | None,
    no_push: bool,
    dry_run: bool,
) -> None:
    """Build the training image and push it to Artifact Registry.

    \b
    The image is REGION-docker.pkg.dev/PROJECT/REPO/gcpgpu-trainer:TAG. It prints
    the image URI on stdout when done (the whole result with --format json).
    Cloud Build needs no Docker here: the sources go to Cloud Storage, the build
    runs in the region, and its status and log stream here until it ends.

    \b
    With --context DIR the image is yours: FROM the flavoured gcpgpu image (built
    too when the registry lacks it), pip install -r requirements, DIR at /workdir.
    'job submit' without --image runs the image this command last pushed for the
    project, region and flavour (see containers/README.md).

    \b
    Examples:
      gcpgpu container build --machine-type a3-megagpu-8g
      gcpgpu container build --flavor none --tag v1 --cloud-build --dry-run
      IMAGE=$(gcpgpu container build -m a3-highgpu-8g)
      gcpgpu container build -m a3-highgpu-8g --context . --requirements requirements.txt
    """
    flavor, _ = images.resolve_flavor(flavor, machine_type)
    images.check_repo(repo)
    if tag is not None:
        images.check_tag(tag)
    staging = images.parse_staging(staging_dir) if staging_dir else None
    if no_push and local is False:
        raise UsageProblem("--no-push applies to --local builds only; Cloud Build always pushes its images")
    if local and settings.emulator and not no_push and not dry_run:
        # The emulator has no registry: `docker push` would reach the real Artifact Registry.
        raise UsageProblem("--local against the emulator: the push would go to the real Artifact Registry; "
                           "add --no-push to build here only, or drop --local (the emulator stands in for Cloud Build)")
    if requirements is not None and context_dir is None:
        raise UsageProblem("--requirements goes with --context DIR (the code the requirements are for)")
    user = None
    if context_dir is not None:
        from gcpgpu.image import user_layer as container_user

        user = container_user.prepare(context_dir, requirements)
    project, region = settings.project, settings.region

    files = images.context_files(images.source_root())
    digest = images.source_digest(files)
    base_tag = f"{flavor}-{digest[:12]}"
    if user is None:
        tag = tag or base_tag
        image, user_image = images.image_uri(region, project, repo, tag), None
    else:
        image = images.image_uri(region, project, repo, base_tag)
        user_image = images.image_uri(region, project, repo, tag or container_user.tag(flavor, digest, user))
        files = files + user.all_files()
        info(f"--context {user.root}: {len(user.files)} files ({user.packed_bytes / 2**20:.1f} MiB packed)"
             + (f", pip install -r {user.requirements}" if user.requirements else ", no requirements file")
             + f"; FROM {image}")
    if local is None:
        if settings.emulator:
            local = False  # the emulator stands in for Cloud Build; a local engine is not emulated
        else:
            local, found = images.docker_engine()
            info(f"{found}: building {'here with docker' if local else 'with Cloud Build'}.")
    elif local:
        reachable, found = images.docker_engine()
        if not reachable and not dry_run:
            raise UsageProblem(f"--local needs a Docker engine, but {found}; use --cloud-build instead")

    build_base = True
    if user is not None and not local and not dry_run:
        # Cloud Build starts from an empty Docker: pulling the base costs far less than building it again.
        from gcpgpu.image import default as default_image

        try:
            held = default_image.registry_images(settings.clients, project, region, repo)
        except CloudError as e:  # no permission to list, say: building the base too still works
            info(f"(cannot list the registry: {e.message})")
            held = None
        build_base = not default_image.has_tag(held, base_tag)
        info(f"Base {image}: " + ("building it too (not in the registry yet)" if build_base
                                  else "in the registry already; the build pulls it"))
    config = images.render_cloudbuild(image, flavor, region, user_image=user_image, build_base=build_base)
    extra = {"cloudbuild.yaml": config, **(user.extra(image) if user else {})}
    context = images.build_context(files, extra)
    info(f"Context: {len(context.files)} files, {len(context.data) / 1024:.0f} KiB, sources {digest[:12]}")

    if local:
        commands = images.docker_commands(image, flavor, push=not no_push, user_image=user_image)
        if dry_run:
            for argv in commands:
                click.echo(" ".join(argv) + (" < context.tar.gz" if argv[1] == "build" else ""))
            return
        images.run_local(commands, context, info)
        if not no_push:
            _remember(settings, region, flavor, user_image or image)
        _report({"image": user_image or image, "flavor": flavor, "built": "local", "pushed": not no_push,
                 **({"base": image} if user_image else {})})
        return

    bucket, prefix = staging or (f"{project.replace(':', '_')}_cloudbuild", "source")
    # The sources' digest names gcpgpu's own context; a --context one is named by its bytes.
    name = f"gcpgpu-{digest[:16]}" if user is None else f"gcpgpu-ctx-{hashlib.sha256(context.data).hexdigest()[:16]}"
    obj = f"{prefix}/{name}.tgz".lstrip("/")
    request = images.build_request(project, region, config, bucket, obj)
    if dry_run:
        if user is not None:
            info("The 'build' step (the base image) is left out when the registry holds it already.")
        _print_request(request)
        return

    clients = settings.clients
    info(f"Uploading the context to gs://{bucket}/{obj}" + (" (held by the emulator)" if clients.is_emulated else ""))
    images.upload_source(clients, bucket, obj, context.data, create_bucket=staging is None)

    def on_status(b: dict) -> None:
        if b["status"] == "QUEUED":
            info(f"Build {b['id']} queued in {region}; log: {b.get('logUrl', '-')}")
        else:
            info(f"Build {b['id']}: {b['status']}")

    final = images.submit(
        clients, request, on_status=on_status, on_log=info, poll_seconds=0.2 if clients.is_emulated else 3.0
    )
    if final["status"] != "SUCCESS":
        detail = final.get("statusDetail") or (final.get("failureInfo") or {}).get("detail") or ""
        raise CloudError(
            f"Cloud Build {final['id']} ended {final['status']}" + (f": {detail}" if detail else "")
            + f" (log: {final.get('logUrl', '-')})"
        )
    built = (final.get("results", {}).get("images") or [{}])[-1]
    _remember(settings, region, flavor, user_image or image)
    _report(
        {
            "image": user_image or image,
            **({"base": image} if user_image else {}),
            "digest": built.get("digest"),
            "flavor": flavor,
            "built": "cloud-build",
            "build_id": final["id"],
            "log_url": final.get("logUrl"),
            "emulated": clients.is_emulated,
        }
    )


def _remember(settings, region: str, flavor: str, image: str) -> None:
    from gcpgpu.image import default as default_image

    default_image.remember(emulated=settings.emulator is not None, project=settings.project, region=region,
                           flavor=flavor, image=image)


def _report(result: dict) -> None:
    # Plain URI for `IMAGE=$(gcpgpu container build ...)`; the whole record for programs.
    if current_format() == "table":
        if result.get("emulated"):
            info("Emulated: the emulator validated and recorded this build; no image exists.")
        click.echo(result["image"])
    else:
        emit(result)


def _print_request(request: dict) -> None:
    fmt = current_format()
    if fmt == "json":
        click.echo(json.dumps(request, indent=2))
    else:
        import yaml

        click.echo("# CreateBuildRequest (not sent: --dry-run)")
        click.echo(yaml.safe_dump(request, sort_keys=False, default_flow_style=False), nl=False)

