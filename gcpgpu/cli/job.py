"""`gcpgpu job`: training jobs on Vertex AI custom jobs or on a gcpgpu cluster's VMs, from one spec."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import click

from gcpgpu.cli.options import wanted_user, with_options
from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.jobs.state import (
    ACTIVE,
    CANCELLED,
    CANCELLING,
    FAILED,
    PENDING,
    QUEUED,
    RECOVERING,
    RETRYING,
    RUNNING,
    STALLED,
    SUCCEEDED,
    JobState,
)
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings

from .attach import attach

# What the follower does besides recovering lost nodes: retries, stalls, webhooks (checked in
# jobs/policy.py, stored in the job's record).
follower_options = with_options(
    click.option("--max-restarts-on-errors", type=click.IntRange(0, 100), metavar="N",
                 help="Cluster: restart the job from its last checkpoint when it fails by itself (a non-zero exit, "
                 "or one of --retry-on-exit-codes; a stall), at most N times."),
    click.option("--retry-on-exit-codes", metavar="CODES", help="Cluster: only these exit codes (comma-separated, "
                 "1-255) count as retryable, e.g. 3,75."),
    click.option("--stall-timeout", metavar="DURATION", help="Cluster: no new trainer step (a user command: no log "
                 "line) for this long is a stall: stacks are captured, the job stopped and restarted (counted as a "
                 "retry), or FAILED with cause 'stalled'."),
    click.option("--notify", "notify", multiple=True, metavar="URL", help="POST one JSON message per state change "
                 "to this http(s) webhook (repeatable); stored with the job in plain text."),
    click.option("--max-spend", metavar="USD", help="Cluster: once the job's cost so far reaches USD its follower "
                 "(the cluster's own after --detach) stops it, its trainer saving a checkpoint first; --notify is "
                 "told SPEND_WARNING at 80%, then CANCELLED with cause 'max spend'."),
)
STATE_CHOICES = (QUEUED, PENDING, RUNNING, RECOVERING, RETRYING, STALLED, SUCCEEDED, FAILED, CANCELLING, CANCELLED)
JOB_COLUMNS = [("id", "ID"), ("name", "NAME"), ("state", "STATE"), ("nodes", "NODES"),
               ("machine_type", "MACHINE TYPE"), ("submitter", "SUBMITTED BY"), ("created", "CREATED"),
               ("recoveries", "RECOVERIES")]
QUEUE_COLUMNS = [("priority", "PRIORITY"), ("position", "PLACE"), ("slurm_nodes", "SLURM NODES"),
                 ("reason", "WHY IT WAITS"), ("via", "VIA")]
STATUS_COLUMNS = [("id", "ID"), ("name", "NAME"), ("state", "STATE"), ("machine_type", "MACHINE TYPE"),
                  ("nodes", "NODES"), ("submitter", "SUBMITTED BY"), ("created", "CREATED"), ("started", "STARTED"), ("ended", "ENDED"),
                  ("error", "ERROR"), ("cause", "CAUSE"), ("node", "NODE"), ("note", "NOTE"), ("attempt", "ATTEMPT"),
                  ("recoveries", "RECOVERIES"), ("restarts", "RETRIES"), ("uptime", "UPTIME"),
                  ("cost", "COST SO FAR"), ("per_mtok", "$ PER M TOKENS"), ("goodput_shown", "GOODPUT"), ("output_dir", "OUTPUT DIR"),
                  ("priority", "PRIORITY"), ("position", "PLACE"), ("scheduler_id", "SCHEDULER ID"), ("reason", "WHY IT WAITS")]
HISTORY_COLUMNS = [("attempt", "ATTEMPT"), ("at", "AT"), ("kind", "KIND"), ("node", "NODE"), ("zone", "ZONE"),
                   ("cause", "CAUSE"),
                   ("last_step", "LAST STEP"), ("resumed_at", "RESUMED AT"), ("redone", "STEPS REDONE")]


def _poll_s(settings: Settings) -> float:
    # The emulator answers in milliseconds; the real API is polled gently.
    return 1.0 if settings.emulator else 15.0


@click.group()
def job() -> None:
    """Run training jobs on Vertex AI or on a gcpgpu cluster's VMs, and follow them.

    \b
    A job id says where the job lives, so status, logs and cancel need nothing else:
      vertex:LOCATION:ID       a Vertex AI custom job
      cluster:CLUSTER:JOB      a job on a gcpgpu cluster's nodes
    """


@job.command(context_settings={"show_default": True})
@click.option("--vertex", "vertex", is_flag=True, default=None, help="Run as a Vertex AI custom job.")
@click.option("--cluster", metavar="NAME", help="Run on the nodes of this gcpgpu cluster ('gcpgpu cluster up').")
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML job spec (any option below as a key; args and command as lists); flags override it.")
@click.option("--machine-type", help="GPU machine type (Vertex: required; cluster: must match the nodes).")
@click.option("--nodes", type=int, help="Nodes (Vertex: replicas, default 1; cluster: default all its nodes).")
@click.option("--priority", metavar="high|normal|low",
              help="A Slurm cluster's queue (cluster up --scheduler slurm): high jobs go first and preempt low "
              "ones, which requeue and resume. Default normal.")
@click.option("--image", metavar="URI", help="Container image. Default: the image 'gcpgpu container build' last "
              "pushed for the project, region and GPUDirect flavour (recorded here; a --context DIR image only for "
              "jobs from DIR: --workdir DIR, or submitted there; on another machine the newest FLAVOR-* "
              "gcpgpu-trainer image in Artifact Registry REGION-docker.pkg.dev/PROJECT/gcpgpu).")
@click.option("--command", "command", metavar="CMD",
              help="Run CMD instead of the bundled trainer, e.g. 'python train.py', behind the image's entrypoint "
                   "(which applies the NCCL profile, --workdir, --mount and --secret). A line with shell syntax (; && "
              "|| | < > & $VAR `...` * ~ #) runs under sh -c; any other is split into words as a shell splits it.")
@click.option("--name", help="Job name (lowercase letters, digits, dashes). Default: train.")
@click.option("--spot", is_flag=True, default=None, help="Vertex: Spot capacity (cheaper, preemptible).")
@click.option("--flex-start", is_flag=True, default=None, help="Vertex: DWS flex-start (waits for capacity).")
@click.option("--max-wait", metavar="DURATION", help="With --flex-start: how long to wait for capacity (e.g. 2h).")
@click.option("--reservation", metavar="RES", help="Vertex: consume a reservation: NAME (with --zone), "
              "projects/P/zones/Z/reservations/NAME, or 'any'.")
@click.option("--env", "env", multiple=True, metavar="K=V",
              help="Environment variable (repeatable); NCCL_* values override the machine's NCCL profile. "
              "Stored in plain text: no secrets.")
@click.option("--no-numa-binding", is_flag=True, default=None,
              help="Leave the ranks unbound (default: each rank's CPU threads and memory on its GPU's NUMA node, "
                   "through torchrun where the image's torch has it; sets GCPGPU_NUMA_BINDING=0).")
@click.option("--workdir", metavar="DIR", help="Your code: DIR is packed (minus .gitignore and .gcpgpuignore "
              "entries; 100 MiB at most), uploaded to the project's staging bucket and unpacked at /workdir on "
              "every node or replica, the job's working directory.")
@click.option("--setup", metavar="CMD", help="Run CMD once per node or replica in /workdir before the command "
              "(e.g. 'pip install -r requirements.txt'); its failure ends the job.")
@click.option("--mount", "mounts", multiple=True, metavar="gs://BUCKET[/PATH]:/DIR[:ro]",
              help="Make a bucket (folder) visible at DIR on every node or replica (repeatable; :ro read-only).")
@click.option("--secret", "secrets", multiple=True, metavar="ENV=projects/P/secrets/NAME[/versions/V]",
              help="Set ENV from Secret Manager where the job runs, with the job's service account (repeatable; "
              "default version latest). Only the name is stored, never the value.")
@click.option("--interactive", is_flag=True, default=None, help="Vertex: an interactive shell per replica "
              "(enableWebAccess); 'job attach JOB' prints their URIs.")
@click.option("--profile", is_flag=True, default=None, help="Profile with Nsight Systems (the trainer's --profile-steps).")
@click.option("--output-dir", metavar="PATH", help="Vertex: base output directory (gs://...); cluster: gs:// or a "
              "path on the nodes. Sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR.")
@click.option("--timeout", metavar="DURATION", help="Stop the job after this long (e.g. 12h).")
@click.option("--restart", type=click.Choice(["default", "never", "on-worker-restart"]),
              help="Vertex: retry policy (never: disable retries; on-worker-restart: restart the whole job).")
@click.option("--service-account", metavar="EMAIL", help="Vertex: the service account the job runs as.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Label for the Vertex job (repeatable).")
@click.option("--region", "job_region", metavar="REGION", help="Vertex: the region (default: the global --region).")
@click.option("--dry-run", is_flag=True, help="Print the request (Vertex) or the job (cluster) and stop.")
@click.option("--wait", is_flag=True, help="Follow the job's state to its end; exit 1 unless it SUCCEEDED.")
@click.option("--recover", type=click.IntRange(0, 100), metavar="N",
              help="Cluster: follow the job and, when a node is lost (Spot preemption, host error), bring the "
              "cluster back to size and resubmit with the trainer's --resume, at most N times. Default with "
              "--wait: 3 on a Spot or flex-start cluster, else 0.")
@click.option("--detach", is_flag=True, help="Cluster: the cluster's own nodes follow and recover the job (one "
              "leads), so this machine may go; 'gcpgpu job follow JOB' watches from anywhere.")
@follower_options
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER_ARGS...]")
@click.pass_obj
def submit(settings: Settings, trainer_args: tuple[str, ...], dry_run: bool, wait: bool, recover: int | None,
           detach: bool, **kw: Any) -> None:
    """Submit a training job; prints its id.

    \b
    Everything after -- goes to the trainer (or to --command), quoted:
      gcpgpu --region us-central1 job submit --vertex --machine-type a3-highgpu-8g --nodes 2 \\
          -- --model 124m --parallel fsdp --precision bf16 --steps 1000
      gcpgpu job submit --cluster mycluster --wait -- --model tiny --steps 50
    """
    from gcpgpu.jobs.submit import submit as submit_job

    done = submit_job(settings, _spec(trainer_args, kw), region=kw.get("job_region"), dry_run=dry_run,
                      recover=recover, detach=detach, wait=wait, say=info)
    shown, jid = done.shown, done.jid
    if jid is None:  # --dry-run
        emit(shown, fmt=settings.format if settings.format != "table" else "yaml")
        return
    if settings.format == "table":
        click.echo(str(jid))
        info(done.line)
    for note in done.notes:
        info(note)
    if not done.follow:
        if settings.format != "table":
            emit(shown)
        return
    final = _follow(settings, jid, recover, notify=done.job.spec.notify, name=done.job.name)
    if settings.format != "table":
        emit(final.to_dict())
    _fail_unless_succeeded(final)


def _spec(trainer_args: tuple[str, ...], kw: dict[str, Any]) -> Any:
    """The JobSpec the options and the spec file (-f) say, options over the file."""
    from gcpgpu.jobs.spec import JobSpec, parse_duration, parse_env, strategy_of
    from gcpgpu.specfile import check_option_values, parse_pairs

    check_option_values(click.get_current_context())
    labels = parse_pairs(kw.get("labels"), "--label")
    flags: dict[str, Any] = {
        "target": "vertex" if kw.get("vertex") else ("cluster" if kw.get("cluster") else None),
        "cluster": kw.get("cluster"),
        "name": kw.get("name"),
        "machine_type": kw.get("machine_type"),
        "nodes": kw.get("nodes"),
        "priority": kw.get("priority"),
        "image": kw.get("image"),
        "command": _command(kw.get("command"), trainer_args),
        "args": list(trainer_args) or None,
        "strategy": strategy_of(spot=bool(kw.get("spot")), flex_start=bool(kw.get("flex_start"))),
        "max_wait": parse_duration(kw["max_wait"], "--max-wait") if kw.get("max_wait") else None,
        "reservation": kw.get("reservation"),
        "env": parse_env((*(kw.get("env") or ()), *(("GCPGPU_NUMA_BINDING=0",) if kw.get("no_numa_binding") else ())))
        or None,
        "profile": kw.get("profile"),
        "interactive": kw.get("interactive"),
        "output_dir": kw.get("output_dir"),
        "timeout": parse_duration(kw["timeout"], "--timeout") if kw.get("timeout") else None,
        "restart": kw.get("restart"),
        "service_account": kw.get("service_account"),
        "labels": labels or None,
        "workdir": kw.get("workdir"),
        "setup": kw.get("setup"),
        "mounts": list(kw.get("mounts") or ()) or None,
        "secrets": list(kw.get("secrets") or ()) or None,
        **_policy_flags(kw),
    }
    spec = JobSpec.from_sources(kw.get("spec_file"), flags)
    if spec.interactive and spec.target == "cluster":
        raise UsageProblem("--interactive is Vertex AI's (enableWebAccess, a shell per replica): a cluster job needs "
                           "none, 'gcpgpu job attach JOB' opens a shell in its container")
    return spec


def _command(line: str | None, trainer_args: tuple[str, ...]) -> list[str] | None:
    """--command's words (usercode.command_words); a line run under `sh -c` takes no arguments after --, which
    the shell would read as $0, $1 ... and the command never get."""
    import shlex

    from gcpgpu.errors import UsageProblem
    from gcpgpu.jobs.usercode import command_words, split_command

    if not line:
        return None
    words = command_words(line)
    if trainer_args and words != split_command(line):
        raise UsageProblem("--command runs under sh -c (its line has shell syntax), where the arguments after -- "
                           "would be $0, $1 ... and never reach the command: write them into the line, e.g. "
                           f"--command {shlex.quote(line + ' ' + shlex.join(trainer_args))}")
    return words


def _policy_flags(kw: dict[str, Any]) -> dict[str, Any]:
    """The follower's settings from the flags, as JobSpec fields (jobs/policy.py checks them together)."""
    from gcpgpu.jobs.policy import parse_exit_codes
    from gcpgpu.jobs.spec import parse_duration
    from gcpgpu.specfile import parse_usd

    stall, codes = kw.get("stall_timeout"), kw.get("retry_on_exit_codes")
    return {"max_restarts_on_errors": kw.get("max_restarts_on_errors"),
            "retry_on_exit_codes": parse_exit_codes(codes) if codes is not None else None,
            "stall_timeout": parse_duration(stall, "--stall-timeout") if stall is not None else None,
            "notify": list(kw.get("notify") or ()) or None,
            "max_spend": parse_usd(kw["max_spend"], "--max-spend") if kw.get("max_spend") is not None else None}


def _teller(jid: Any, attempt: bool = True) -> Callable[[JobState], None]:
    """What a follower calls on each change of the job's state: the state on stderr (with a recovered
    job's attempt)."""
    def tell(state: JobState) -> None:
        about = ", ".join(x for x in (f"node {state.node}" if state.node else "", state.cause or "") if x)
        info(f"{time.strftime('%H:%M:%S')} {jid}: {state.state}"
             + (f" (attempt {state.attempt})" if attempt and state.attempt else "")
             + (f": {about}" if about and state.state in (RECOVERING, RETRYING, STALLED) else ""))

    return tell


def _follow(settings: Settings, jid: Any, recover: int | None, **notify: Any) -> JobState:
    """Follow the job to its end (jobs/follow.py), telling on stderr what happens and the trainer's
    steps, loss and tokens/s from its log as they come (a user's command: each line, after its rank), each
    at the time its program wrote it (a backlog read on joining late keeps its own times)."""
    from gcpgpu.cli.progress import ConsoleReporter
    from gcpgpu.errors import Interrupted
    from gcpgpu.jobs.follow import follow

    try:
        return follow(settings.clients, settings.project, jid, recover=recover, on_state=_teller(jid), say=info,
                      poll_s=_poll_s(settings), reporter=ConsoleReporter(),
                      progress=lambda line, at: info(f"{time.strftime('%H:%M:%S', time.localtime(at))} {jid}: {line}"),
                      progress_poll_s=_poll_s(settings) if settings.emulator else 5.0, **notify)
    except KeyboardInterrupt:  # a Vertex job (a cluster job's follower says its own, jobs/cluster/follower.py)
        raise Interrupted(f"{jid} is no longer followed here, but it keeps running (and costing): "
                          f"'gcpgpu job cancel {jid}' stops it, 'gcpgpu job follow {jid}' follows it again.") from None


def _fail_unless_succeeded(state: JobState) -> None:
    if state.state == SUCCEEDED:
        info(f"Job {state.id} SUCCEEDED.")
        return
    if state.cause:
        raise CloudError(f"job {state.id} ended {state.state}: {state.cause} (all its output: gcpgpu job logs {state.id})")
    why = f": {state.error}" if state.error else ""
    raise CloudError(f"job {state.id} ended {state.state}{why}")


@job.command()
@click.argument("job_id", metavar="JOB")
@click.pass_obj
def status(settings: Settings, job_id: str) -> None:
    """Show a job's state, start and end, error, and each node's (cluster) or worker pool's (Vertex) detail.

    A failed job's CAUSE is the first error line its program printed (read from its log): the
    trainer's own one-line error or an exception, not the launcher's ChildFailedError. A cluster job
    that was recovered from lost nodes also shows each recovery: when, which node, why, and how many
    steps it redid (from the trainer's own log lines).
    """
    from gcpgpu.jobs import ids
    from gcpgpu.jobs.detail import detail

    state = detail(settings.clients, settings.project, ids.parse(job_id))
    if settings.format != "table":
        emit(state.to_dict())
        return
    shown = state.to_dict()
    if state.goodput:
        got = state.goodput
        shown["goodput_shown"] = (f"{got['percent']:.1f}% of {_hours(got['node_s'])} node-time"
                                  if got.get("percent") is not None else f"- ({got.get('reason')})")
    shown["per_mtok"] = "-" if state.usd_per_million_tokens is None else \
        f"${state.usd_per_million_tokens:,.2f} ({state.tokens / 1e6:,.3g}M tokens)"
    queue = {"priority", "position", "scheduler_id", "reason"}  # only a job that waits in a shared queue has them
    emit(shown, [c for c in STATUS_COLUMNS if state.waits_in_queue or c[0] not in queue], title=f"Job {state.id}")
    if state.target == "vertex":
        emit(state.pools, [("pool", "POOL"), ("replicas", "REPLICAS"), ("machine_type", "MACHINE TYPE"),
                           ("accelerators", "ACCELERATORS"), ("image", "IMAGE")])
        if state.shells:
            emit([{"replica": k, "uri": v} for k, v in sorted(state.shells.items())],
                 [("replica", "REPLICA"), ("uri", "INTERACTIVE SHELL")])
    else:
        emit(state.per_node, [("node", "NODE"), ("rank", "RANK"), ("state", "STATE"), ("exit_code", "EXIT"),
                              ("started", "STARTED"), ("ended", "ENDED"), ("pull_s", "PULL S"), ("message", "MESSAGE")])
        if state.history:
            emit(state.history, HISTORY_COLUMNS, title="Recoveries and retries")
    if state.goodput and state.goodput.get("node_s"):
        emit(_goodput_rows(state.goodput, state.goodput_lost_usd, state.spent.price_per_hour if state.spent else None),
             [("part", "PART"), ("time", "NODE-TIME"), ("usd", "COST"), ("share", "SHARE")],
             title="Goodput: where the node-time went")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} node-h" if seconds >= 360 else f"{seconds:.0f} node-s"


def _goodput_rows(got: dict, lost_usd: dict | None = None, price: float | None = None) -> list[dict]:
    """`job status`'s goodput table: productive time, then each kind of lost time that is not nil, each
    with the share goodput computed (the productive one is GOODPUT's percent, where it has one) and its
    dollars at the job's node price ('-': no price)."""
    share = got["share"]
    parts = [("productive", "productive", got["productive_s"]),
             *((f"lost: {k.replace('_', ' ')}", k, v) for k, v in got["lost_s"].items() if v)]
    usd = {**(lost_usd or {}), **({"productive": round(got["productive_s"] * price / 3600, 2)} if price else {})}
    return [{"part": name, "time": _hours(v), "share": f"{share[key]:.1f}%",
             "usd": f"${usd[key]:,.2f}" if key in usd else "-"} for name, key, v in parts]


@job.command()
@click.argument("job_id", metavar="JOB")
@click.option("--recover", type=click.IntRange(0, 100), metavar="N",
              help="Cluster: recover from lost nodes at most N times in all (counting earlier recoveries). "
              "Default: 3 on a Spot or flex-start cluster, else 0.")
@click.pass_obj
def follow(settings: Settings, job_id: str, recover: int | None) -> None:
    """Follow a job to its end (exit 1 unless it SUCCEEDED); a cluster job is recovered from lost nodes.

    Picks up where an interrupted 'job submit --wait' (or one without --wait) left off."""
    from gcpgpu.jobs import ids

    final = _follow(settings, ids.parse(job_id), recover)
    if settings.format != "table":
        emit(final.to_dict())
    _fail_unless_succeeded(final)


@job.command("list")
@click.option("--vertex", "only", flag_value="vertex", default=None, help="Only Vertex AI jobs (of the region).")
@click.option("--clusters", "only", flag_value="cluster", help="Only jobs on gcpgpu clusters.")
@click.option("--cluster", "cluster_name", metavar="NAME",
              help="Only jobs on this cluster; a Slurm cluster's show its queue (priority, place, why it waits).")
@click.option("--state", type=click.Choice(STATE_CHOICES, case_sensitive=False), help="Only jobs in this state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most this many Vertex jobs.")
@click.option("--region", "job_region", metavar="REGION", help="Vertex: the region (default: the global --region).")
@click.option("--mine", is_flag=True, help="Only the jobs you submitted (the identity of your credentials).")
@click.option("--user", "user", metavar="EMAIL", help="Only the jobs this person or service account submitted.")
@click.pass_obj
def list_cmd(settings: Settings, only: str | None, state: str | None, limit: int, job_region: str | None,
             cluster_name: str | None, mine: bool, user: str | None) -> None:
    """List Vertex AI custom jobs of the region (newest first) and the jobs on gcpgpu clusters."""
    from gcpgpu.gcp import identity
    from gcpgpu.jobs import route

    wanted = wanted_user(settings, mine, user)
    region = job_region or settings.optional("region")
    project = settings.project
    if cluster_name:
        only = "cluster"
    rows = route.list_jobs(settings.clients, project, only=only, region=region, state=state.upper() if state else None,
                           limit=limit, say=info)
    if cluster_name:
        rows = [r for r in rows if str(r["id"]).startswith(f"cluster:{cluster_name}:")]
        if not rows:  # no job, and maybe no such cluster: a typo is said, with the name it was likely meant to be
            from gcpgpu.cluster.observe import ranked_nodes
            from gcpgpu.cluster.unknown import missing

            if not ranked_nodes(settings.clients, project, cluster_name):
                raise missing(settings.clients, project, cluster_name)
    if wanted is not None:
        rows = [r for r in rows if identity.matches(r.get("submitter"), wanted)]
    queued = any(r.get("priority") for r in rows)
    emit(rows, JOB_COLUMNS + (QUEUE_COLUMNS if queued else []), empty=f"No jobs in project {project}"
         + (f" on cluster {cluster_name}" if cluster_name else "") + (f" submitted by {wanted}." if wanted else "."))



@job.command()
@click.argument("job_id", metavar="JOB")
@click.option("--follow", "-F", is_flag=True, help="Keep printing new lines until the job ends.")
@click.pass_obj
def logs(settings: Settings, job_id: str, follow: bool) -> None:
    """Print a job's log: its replicas' (Vertex) or nodes' (cluster) output, from Cloud Logging."""
    from gcpgpu.jobs import ids, route
    from gcpgpu.jobs import logs as job_logs

    jid = ids.parse(job_id)
    project = settings.project
    flt = route.log_filter(project, jid)
    as_json = settings.format != "table"

    def show(entry: dict) -> None:
        if as_json:
            click.echo(json.dumps(job_logs.record(entry)))
        else:
            click.echo(f"[{job_logs.tag(entry)}] {job_logs.message(entry)}")

    def finished() -> bool:
        return route.status(settings.clients, project, jid).final

    if jid.target == "cluster":
        state = route.status(settings.clients, project, jid)
        if state.output:  # sbatch'ed by hand: Slurm writes its output to a file on its batch host, nothing else
            info(_output_file(jid, state.output))
            return
    count = job_logs.stream(settings.clients, project, flt, show, follow=follow, finished=finished,
                            poll_s=_poll_s(settings) if settings.emulator else 5.0)
    if count == 0 and not follow:
        route.status(settings.clients, project, jid)  # a job that does not exist is its one line, exit 1
        info(f"No log entries for {jid} yet (Cloud Logging can lag a minute behind).")


def _output_file(jid: Any, output: dict) -> str:
    """Where a job sbatch'ed by hand on a Slurm cluster's node has its output (its -o file), and how to read it."""
    import shlex

    node = str(output.get("node"))
    rank = node.rsplit("-", 1)[-1]
    read = f"gcpgpu cluster ssh {jid.cluster} --node {rank} tail -n 100 {shlex.quote(str(output.get('path')))}"
    return (f"Job {jid} was sbatch'ed by hand: its output is not in Cloud Logging but in Slurm's output file "
            f"{output.get('path')} on node {node}; read it with: {read}")


@job.command()
@click.argument("job_id", metavar="JOB")
@click.option("--wait", is_flag=True, help="Wait until the job has stopped.")
@click.option("--force", is_flag=True, help="Cancel it even if someone else submitted it.")
@click.pass_obj
def cancel(settings: Settings, job_id: str, wait: bool, force: bool) -> None:
    """Cancel a job: Vertex AI stops its replicas; on a cluster every node's agent stops its container."""
    from gcpgpu.jobs import ids, route

    jid = ids.parse(job_id)
    if not force:
        _refuse_anothers(settings, jid, route.status(settings.clients, settings.project, jid).submitter)
    state = route.cancel(settings.clients, settings.project, jid)
    still = [r["node"] for r in state.per_node if r["state"] in ACTIVE]
    if state.final and state.state != CANCELLED and still:
        info(f"Job {jid} had already ended {state.state}; stopping it on {', '.join(still)}, which still ran it.")
    elif state.final and state.state != CANCELLED:
        info(f"Job {jid} had already ended {state.state}.")
    elif wait:
        from gcpgpu.jobs.follow import watch

        state = watch(settings.clients, settings.project, jid, _teller(jid, attempt=False), _poll_s(settings))
    else:
        info(f"Cancelling job {jid} (now {state.state}).")
    if settings.format != "table":
        emit(state.to_dict())


def _refuse_anothers(settings: Settings, jid: Any, submitter: str | None) -> None:
    """Refuse to cancel a job someone else submitted (without --force): what stops anyone with the project's
    access from doing so is the project's IAM, not gcpgpu, so it asks to be sure."""
    from gcpgpu.gcp import identity

    me = identity.whoami(settings.clients)
    if submitter and submitter != identity.UNKNOWN and me != identity.UNKNOWN and submitter.lower() != me.lower():
        raise UsageProblem(f"job {jid} was submitted by {submitter}, not by you ({me}); only the project's IAM keeps "
                           "others from stopping it: pass --force to cancel it anyway")


job.add_command(attach)
