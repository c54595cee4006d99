"""`gcpgpu container build`: build the training image locally or with Cloud Build, and push it."""

from __future__ import annotations

import json

import click

from gcpgpu import container as images
from gcpgpu.errors import CloudError, UsageProblem
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
    Examples:
      gcpgpu container build --machine-type a3-megagpu-8g
      gcpgpu container build --flavor none --tag v1 --cloud-build --dry-run
      IMAGE=$(gcpgpu container build -m a3-highgpu-8g)
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
    project, region = settings.project, settings.region

    files = images.context_files(images.source_root())
    digest = images.source_digest(files)
    tag = tag or f"{flavor}-{digest[:12]}"
    image = images.image_uri(region, project, repo, tag)
    config = images.render_cloudbuild(image, flavor, region)
    context = images.build_context(files, {"cloudbuild.yaml": config})
    info(f"Context: {len(context.files)} files, {len(context.data) / 1024:.0f} KiB, sources {digest[:12]}")

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

    if local:
        commands = images.docker_commands(image, flavor, push=not no_push)
        if dry_run:
            for argv in commands:
                click.echo(" ".join(argv) + (" < context.tar.gz" if argv[1] == "build" else ""))
            return
        images.run_local(commands, context, info)
        _report({"image": image, "flavor": flavor, "built": "local", "pushed": not no_push})
        return

    bucket, prefix = staging or (f"{project.replace(':', '_')}_cloudbuild", "source")
    obj = f"{prefix}/gcpgpu-{digest[:16]}.tgz".lstrip("/")
    request = images.build_request(project, region, config, bucket, obj)
    if dry_run:
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
    built = (final.get("results", {}).get("images") or [{}])[0]
    _report(
        {
            "image": image,
            "digest": built.get("digest"),
            "flavor": flavor,
            "built": "cloud-build",
            "build_id": final["id"],
            "log_url": final.get("logUrl"),
            "emulated": clients.is_emulated,
        }
    )


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

