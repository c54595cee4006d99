"""Vertex AI custom jobs: a validated job rendered (templates/vertex_custom_job.yaml.j2) into a
CreateCustomJob request, and submitted, read, listed and cancelled with aiplatform_v1.JobServiceClient."""

from __future__ import annotations

from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.resources import render

from . import ids
from .spec import ValidJob, job_env
from .state import JobState
from .usercode import container_call

STRATEGY = {"standard": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START"}
LABEL_MANAGED = "gcpgpu-managed"
LABEL_JOB = "gcpgpu-job"
EMULATOR_LABEL = "gcpgpu-emulator"  # the emulator says whether it ran a job locally or simulated it


SUBMITTER_ENV = "GCPGPU_SUBMITTER"  # who submitted it (gcp/identity.py): a label cannot hold an e-mail address


def build_request(job: ValidJob, project: str, nfs: list[dict] | None = None, network: str | None = None,
                  submitter: str | None = None) -> dict:
    """The CreateCustomJob request as REST JSON: {"parent": ..., "customJob": {...}}. No API call: `nfs` (each
    worker pool's nfsMounts) and `network` (the peered VPC they need) come from resolve_nfs; `submitter` is
    kept in the containers' environment, where `job status` reads it back."""
    import yaml

    machine = job.machine
    assert machine is not None and job.nodes is not None and job.region is not None  # validate() made sure
    if job.image_pending:
        raise RuntimeError("the default image is resolved (jobs/submit.py) before the request is built")
    pools = [{"replicas": 1}] + ([{"replicas": job.nodes - 1}] if job.nodes > 1 else [])
    env = job_env(job, machine, "vertex")
    if submitter:
        env = {**env, SUBMITTER_ENV: submitter}
    command, args = container_call(job)
    text = render(
        "vertex_custom_job.yaml.j2",
        name=job.name,
        labels={LABEL_MANAGED: "true", LABEL_JOB: job.name, **job.spec.labels},
        pools=pools,
        machine_type=machine.name,
        accelerator_type=machine.vertex_accelerator,
        accelerator_count=machine.gpu_count,
        reservation=job.reservation,
        image=job.image,
        command=command,
        args=args,
        env=[{"name": k, "value": v} for k, v in env.items()],
        strategy=STRATEGY[job.spec.strategy],
        max_wait=job.spec.max_wait,
        timeout=job.spec.timeout,
        restart=job.spec.restart,
        output_dir=job.spec.output_dir,
        service_account=job.spec.service_account,
        nfs_mounts=nfs or [],
        network=network,
        enable_web_access=bool(job.spec.interactive),
    )
    return {"parent": f"projects/{project}/locations/{job.region}", "customJob": yaml.safe_load(text)}


def resolve_nfs(clients: Clients, project: str, job: ValidJob) -> tuple[list[dict], str | None]:
    """The job's --mount filestore:NAME:/mnt/nfs/DIR as Vertex AI's NfsMount (server, path, mountPoint) and
    the network the job must peer with to reach them (CustomJobSpec.network: projects/NUMBER/global/
    networks/NAME, the Filestore instance's; Vertex reaches it over private service access)."""
    from gcpgpu.storage.access import peering_network
    from gcpgpu.storage.apply import nfs_share

    from .usercode import nfs_mounts

    shares = nfs_mounts(job.spec.mounts, "vertex")
    if not shares:
        return [], None
    out, networks = [], set()
    for want in shares:
        server, path, net = nfs_share(clients, project, want, str(job.region))
        out.append({"server": server, "path": path, "mountPoint": want.path.removeprefix("/mnt/nfs/")})
        networks.add(net)
    if len(networks) > 1:
        raise CloudError(f"--mount: the Filestore instances are on networks {', '.join(sorted(networks))}; a Vertex "
                         "AI job peers with one network")
    return out, peering_network(clients, project, networks.pop())


def submit(clients: Clients, request: dict) -> tuple[ids.JobId, JobState]:
    """Create the CustomJob; returns its id and its status."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    location = request["parent"].rsplit("/", 1)[1]
    message = aiplatform_v1.CustomJob.wrap(json_format.ParseDict(request["customJob"], aiplatform_v1.CustomJob.pb()()))
    created = clients.job_service(location).create_custom_job(parent=request["parent"], custom_job=message)
    jid = ids.vertex(created.name)
    return jid, describe(jid, created)


def get(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    """The job's state; a job Vertex AI does not know is one line naming it (CloudError, exit 1)."""
    from google.api_core import exceptions

    try:
        job = clients.job_service(jid.location).get_custom_job(name=jid.resource_name(project))
    except exceptions.NotFound:
        raise CloudError(f"no job {jid} in project {jid.project or project} (see 'gcpgpu job list --vertex "
                         f"--region {jid.location}')") from None
    return describe(jid, job)


def runs_user_command(clients: Clients, project: str, jid: ids.JobId) -> bool:
    """Whether the custom job's chief (pool 0) runs a user's command rather than the bundled trainer."""
    from google.api_core import exceptions

    from gcpgpu.trainer.argv import trainer_args

    try:
        job = clients.job_service(jid.location).get_custom_job(name=jid.resource_name(project))
    except exceptions.GoogleAPICallError as e:
        raise CloudError(f"reading job {jid} failed: {e}") from None
    pools = job.job_spec.worker_pool_specs
    if not pools:
        return False
    spec = pools[0].container_spec
    return trainer_args(spec.image_uri, list(spec.command), list(spec.args)) is None


def web_access(clients: Clients, project: str, jid: ids.JobId) -> tuple[dict[str, str], str]:
    """Each replica's interactive-shell URI (CustomJob.webAccessUris: a job submitted with enableWebAccess,
    while it runs), and the job's state."""
    from google.api_core import exceptions

    try:
        job = clients.job_service(jid.location).get_custom_job(name=jid.resource_name(project))
    except exceptions.NotFound:
        raise CloudError(f"no job {jid} in project {jid.project or project}") from None
    return dict(job.web_access_uris), describe(jid, job).state


def cancel(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    """Ask Vertex AI to cancel; the job goes CANCELLING, then CANCELLED. Returns its status after asking."""
    from google.api_core import exceptions

    service = clients.job_service(jid.location)
    try:
        service.cancel_custom_job(name=jid.resource_name(project))
    except exceptions.FailedPrecondition:
        pass  # already finished: the status says how
    except exceptions.NotFound:
        pass  # no such job: get() says so in one line
    return get(clients, project, jid)


def list_jobs(clients: Clients, project: str, region: str, state: str | None = None, limit: int = 50) -> list[dict]:
    """The region's custom jobs, newest first (the API's own filter does the selecting)."""
    flt = f'state="JOB_STATE_{state}"' if state else ""
    pager = clients.job_service(region).list_custom_jobs(
        request={"parent": f"projects/{project}/locations/{region}", "filter": flt, "page_size": min(limit, 100)})
    rows = []
    for job in pager:
        rows.append(describe(ids.vertex(job.name), job).to_dict())
        if len(rows) >= limit:
            break
    return rows


def log_filter(jid: ids.JobId) -> str:
    """The Cloud Logging filter for a custom job's entries (Vertex writes them as resource ml_job)."""
    return f'resource.type="ml_job" AND resource.labels.job_id="{jid.job}"'


def _time(job: Any, name: str) -> str | None:
    value = getattr(job, name, None)
    if not value or name not in job:
        return None
    return value.isoformat().replace("+00:00", "Z")


def describe(jid: ids.JobId, job: Any) -> JobState:
    """A CustomJob as gcpgpu shows it: short state, times, error, and one row per worker pool."""
    state = job.state.name.removeprefix("JOB_STATE_")
    pools = []
    for i, pool in enumerate(job.job_spec.worker_pool_specs):
        if not pool.replica_count:
            continue
        ms = pool.machine_spec
        accel = f"{ms.accelerator_count} x {ms.accelerator_type.name}" if ms.accelerator_count else None
        pools.append({"pool": f"workerpool{i}", "replicas": int(pool.replica_count), "machine_type": ms.machine_type,
                      "accelerators": accel, "image": pool.container_spec.image_uri or None})
    labels = dict(job.labels)
    first = job.job_spec.worker_pool_specs[0].container_spec.env if job.job_spec.worker_pool_specs else []
    submitter = next((e.value for e in first if e.name == SUBMITTER_ENV), None)
    message = job.error.message if "error" in job and job.error.message else None
    emulated = labels.get(EMULATOR_LABEL)
    if emulated == "simulated":
        note = "simulated by the gcpgpu emulator: nothing ran (see 'gcpgpu job logs')"
    elif emulated == "local-run":
        note = "run by the gcpgpu emulator as local processes on this machine"
    else:
        note = None
    return JobState(
        id=str(jid),
        target="vertex",
        name=job.display_name,
        state=state,
        shells=dict(job.web_access_uris),
        created=_time(job, "create_time"),
        started=_time(job, "start_time"),
        ended=_time(job, "end_time"),
        error=message,
        nodes=sum(p["replicas"] for p in pools),
        machine_type=pools[0]["machine_type"] if pools else None,
        submitter=submitter,
        strategy=job.job_spec.scheduling.strategy.name if "scheduling" in job.job_spec else None,
        pools=pools,
        resource=job.name,
        note=note,
    )


def with_spent(state: JobState, now: float) -> JobState:
    """`state` (a Vertex job's) with its uptime and node-hours so far: its replicas from when they started
    running to its end (now while it runs). Its cost is not Compute's VM price (Vertex AI bills training
    machines on SKUs of its own, which gcpgpu's catalog does not hold yet), so it stays unknown ("-")."""
    from dataclasses import replace

    from gcpgpu.cluster.cost import shown_uptime
    from gcpgpu.times import parse_timestamp

    from .state import Spent

    began = parse_timestamp(state.started)
    if began is None:
        return state
    seconds = max(0.0, (parse_timestamp(state.ended) or now) - began)
    replicas = sum(int(p.get("replicas") or 0) for p in state.pools) or int(state.nodes or 1)
    return replace(state, spent=Spent(uptime_s=round(seconds), node_hours=round(replicas * seconds / 3600, 3),
                                      cost_usd=None, uptime=shown_uptime(seconds), cost="-"))
