"""`job submit`'s one path: validate -> place -> image -> workdir -> submit.

Each step returns a value and changes nothing it was given. The job is checked once (spec.validate,
before any request; a frozen ValidJob); the default image (gcpgpu/image/default.py), the staged
--workdir (workdir.py) and a cluster job's placement (jobs/cluster/placement.py: the cluster's nodes,
read once, and the trainer's arguments fitted to them) are values of their own, and the job the target
receives is made from them. A Vertex AI job's image is known from its region before anything is staged;
a cluster job's region and GPUDirect flavour are its nodes', known once it is placed. A cluster job then
goes to its cluster's backend (jobs/cluster/backend.py, by the scheduler its nodes name), which holds the
cluster while the job is staged (the agent backend: the cluster's lease) and puts it there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gcpgpu import catalog
from gcpgpu.errors import UsageProblem
from gcpgpu.settings import Settings

from . import policy
from .cluster.placement import Asked
from .ids import JobId
from .spec import JobSpec, ValidJob, validate


@dataclass(frozen=True)
class Submitted:
    """What `job submit` did: the job as it went (or, with --dry-run, would go) and what to print."""

    job: ValidJob  # image, workdir and a cluster job's arguments decided
    shown: dict[str, Any]  # --dry-run: the request (Vertex) or the job (cluster); else the job's summary
    jid: JobId | None = None  # None with --dry-run
    line: str = ""  # the one line said of the job beside its id (table format)
    notes: list[str] = field(default_factory=list)  # said whatever the format
    # Whether the submitting command follows the job now: --wait and --recover do, and retries, stall
    # detection and webhooks need a follower (the nodes' own after --detach); on Slurm, --wait only.
    follow: bool = False


def submit(settings: Settings, spec: JobSpec, *, region: str | None = None, dry_run: bool = False,
           recover: int | None = None, detach: bool = False, wait: bool = False,
           say: Callable[[str], None] = lambda _line: None) -> Submitted:
    """Check `spec`, place it (cluster), decide its image, stage its workdir and submit it (not with
    `dry_run`). `region`: the job's own (job submit --region), else the global one. `say` tells
    warnings, notes and what was decided on stderr."""
    job = _validate(settings, spec, region)
    if detach and (job.target != "cluster" or wait):
        raise UsageProblem("--detach applies to --cluster jobs without --wait (Vertex AI follows its own jobs; "
                           "after --detach, 'gcpgpu job follow JOB' watches)")
    if recover is not None and job.target != "cluster":
        raise UsageProblem("--recover applies to --cluster jobs; Vertex AI restarts a job's workers itself "
                           "(see --restart)")
    for warning in job.warnings:
        say(f"warning: {warning}")
    if job.target == "vertex":
        follow = (wait or bool(policy.record_fields(job.spec))) and not detach
        return replace(_vertex(settings, job, dry_run, say), follow=follow)
    return _cluster(settings, job, dry_run, say, Asked(recover, detach, wait))


def _validate(settings: Settings, spec: JobSpec, region: str | None) -> ValidJob:
    project = settings.optional("project")
    if spec.target == "vertex" or (spec.target == "cluster" and not spec.image):
        project = settings.project  # needed for the request (or the default image): say how to set it now
    return validate(spec, project=project, region=region or settings.optional("region"),
                    zone=settings.optional("zone"))


def _image(settings: Settings, job: ValidJob, region: str, machine: catalog.MachineType, dry_run: bool,
           say: Callable[[str], None]) -> str:
    """The job's image: its --image, else the one `container build` last pushed for the region and flavour
    (a --context image only for a job from that folder)."""
    if not job.image_pending:
        return job.image
    from gcpgpu.image import default as default_image

    return default_image.resolve(settings, region=region, flavor=machine.gpudirect, dry_run=dry_run, say=say,
                                 origin=_origin(job))


def _origin(job: ValidJob) -> str | None:
    """The folder the job is from (a `container build --context` image of it is the job's default): its
    --workdir, else the folder it is submitted from (None when that folder is gone)."""
    if job.spec.workdir:
        return job.spec.workdir
    try:
        return os.getcwd()
    except OSError:
        return None


def _workdir(settings: Settings, job: ValidJob, dry_run: bool, say: Callable[[str], None],
             packed: Any = None) -> str | None:
    """gs:// of the job's packed --workdir, staged (listed only, with --dry-run); None without one."""
    if not job.spec.workdir:
        return None
    from . import workdir

    return workdir.stage(settings.clients, settings.project, job, dry_run=dry_run, say=say, packed=packed)


def _vertex(settings: Settings, job: ValidJob, dry_run: bool, say: Callable[[str], None]) -> Submitted:
    from gcpgpu.gcp.identity import whoami

    from . import vertex

    assert job.machine is not None and job.region is not None  # validate() made sure
    image = _image(settings, job, job.region, job.machine, dry_run, say)
    job = replace(job, image=image, image_pending=False, workdir_uri=_workdir(settings, job, dry_run, say))
    request = vertex.build_request(job, settings.project, *vertex.resolve_nfs(settings.clients, settings.project, job),
                                   submitter=None if dry_run else whoami(settings.clients))
    for note in job.notes:
        say(f"note: {note}")
    if dry_run:
        return Submitted(job, request)
    jid, state = vertex.submit(settings.clients, request)
    return Submitted(job, state.to_dict(), jid,
                     line=f"Submitted {job.name} as {jid} ({state.nodes} x {state.machine_type}); follow it with "
                          f"'gcpgpu job logs {jid} --follow'")


def _cluster(settings: Settings, job: ValidJob, dry_run: bool, say: Callable[[str], None], asked: Asked) -> Submitted:
    from . import usercode
    from .cluster import backend, placement
    from .spec import job_env

    cluster = str(job.spec.cluster)
    # Pack --workdir first: a folder over the cap is bad input, said before any request is made.
    packed = None
    if job.spec.workdir:
        from gcpgpu.image.pack import pack

        packed = pack(job.spec.workdir)
    # The cluster's nodes, read once, say how many processes run and which backend takes the job: read
    # them (nothing changes) for --dry-run too, so it refuses, and fits defaults, as submit does; before
    # anything is uploaded, so a cluster that is not there (a typo) is said first.
    placed, target = backend.placed(settings.clients, settings.project, job)
    # The image, and with --detach the image the nodes' follower runs from: decided (read only) before
    # anything is written, as either may refuse (none built).
    image = _image(settings, job, placed.nodes[0].region, placed.machine, dry_run, say)
    agent = None
    if asked.detach:  # the image rule lives with the image's (image/follower.py)
        from gcpgpu.image.follower import detached_follower

        agent = detached_follower(settings, image, placed.nodes, dry_run=dry_run, say=say)

    def staged() -> ValidJob:
        """The job with its workdir uploaded (listed only, with --dry-run), image and placement decided."""
        ready = placed.apply(replace(job, image=image, image_pending=False,
                                     workdir_uri=_workdir(settings, job, dry_run, say, packed)))
        for note in ready.notes:
            say(f"note: {note}")
        return ready

    if dry_run:
        ready = staged()
        command, args = usercode.container_call(ready)
        return Submitted(ready, {"target": "cluster", "cluster": cluster, "name": ready.name,
                                 "nodes": len(placed.nodes), "machine_type": placed.machine.name,
                                 "image": placement.image_of(ready), "command": command, "args": args,
                                 "env": job_env(ready, placed.machine, "vm"),
                                 **({"follower_image": agent} if agent else {})})
    # The cluster is held (the agent backend: its lease, its nodes checked free) before the workdir goes up.
    with target.claim(settings.clients, settings.project, placed) as put:
        ready = staged()
        done = put(ready, replace(asked, agent=agent))
    return Submitted(ready, done.shown, done.jid, done.line, done.notes, done.follow)
