"""`gcpgpu container build`: build the training image locally or with Cloud Build, and push it."""

from __future__ import annotations

import json

import click

from gcpgpu.image import build as images
from gcpgpu.image.name import DEFAULT_REPO
from gcpgpu.output import current_format, emit, info


@click.group()
def container() -> None:
    """The training image: CUDA, the tested PyTorch release, gcpgpu's trainer, Nsight Systems, NCCL plugin.

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
    default=DEFAULT_REPO,
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
    project, region and flavour; a --context DIR image only for jobs from DIR
    (--workdir DIR, or submitted there). See containers/README.md.

    \b
    Examples:
      gcpgpu container build --machine-type a3-megagpu-8g
      gcpgpu container build --flavor none --tag v1 --cloud-build --dry-run
      IMAGE=$(gcpgpu container build -m a3-highgpu-8g)
      gcpgpu container build -m a3-highgpu-8g --context . --requirements requirements.txt
    """
    from gcpgpu.image.service import BuildRequest, build_image

    request = BuildRequest(flavor=flavor, machine_type=machine_type, tag=tag, repo=repo, local=local,
                           staging_dir=staging_dir, context_dir=context_dir, requirements=requirements,
                           push=not no_push, dry_run=dry_run)
    built = build_image(settings, request, info)
    if built.result is not None:
        _report(built.result)
    elif built.request is not None:
        _print_request(built.request)
    for argv in built.commands:
        click.echo(" ".join(argv) + (" < context.tar.gz" if argv[1] == "build" else ""))


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
