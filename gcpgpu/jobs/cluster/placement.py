"""Where a cluster job goes: the cluster's nodes, read once, the job's in rank order, and its trainer's
arguments fitted to them (reads only, so `job submit --dry-run` refuses what submit refuses); what its
submitter asked besides the job (Asked), and what the cluster's backend did with it (Put)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gcpgpu import catalog
from gcpgpu.cluster.observe import Node, ranked_nodes
from gcpgpu.errors import UsageProblem
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs.ids import JobId
from gcpgpu.jobs.spec import ValidJob, fit_trainer_args


@dataclass(frozen=True)
class Placement:
    """Where a cluster job goes: its nodes in rank order (the cluster's first --nodes), their machine type,
    and the job's trainer arguments fitted to nodes x GPUs per node (with the notes that say what was added)."""

    nodes: list[Node]
    machine: catalog.MachineType
    args: list[str]
    notes: list[str]
    cluster: str = ""
    every: list[Node] = field(default_factory=list)  # all the cluster's nodes, as the one read saw them

    def apply(self, job: ValidJob) -> ValidJob:
        """The job with the arguments fitted here (a new value: the validated one is left as it was); the
        same again adds nothing."""
        return replace(job, args=self.args, notes=[*job.notes, *(n for n in self.notes if n not in job.notes)])


def place(clients: Clients, project: str, job: ValidJob, cluster: str) -> Placement:
    """The nodes the job would run on (the cluster's first --nodes, all by default) and their machine type,
    with the job's trainer arguments checked and fitted (fit_trainer_args) to nodes x GPUs per node: one
    aggregatedList."""
    nodes = ranked_nodes(clients, project, cluster)
    if not nodes:
        from gcpgpu.cluster.unknown import missing

        raise missing(clients, project, cluster)
    machine = catalog.get_machine_type(nodes[0].machine_type)
    if job.machine is not None and job.machine.name != machine.name:
        raise UsageProblem(f"--machine-type {job.machine.name} does not match cluster {cluster}, whose nodes are "
                           f"{machine.name}; drop --machine-type")
    want = job.nodes or len(nodes)
    if want > len(nodes):
        raise UsageProblem(f"--nodes {want}: cluster {cluster} has {len(nodes)} node(s); use --nodes "
                           f"{len(nodes)} or fewer, or grow it with 'gcpgpu cluster up {cluster} --nodes {want}'")
    # What the real cloud runs: every GPU of every chosen node (the emulator runs one process per node,
    # and a batch that splits over the GPUs splits over the nodes too).
    args, notes = fit_trainer_args(job, world=want * machine.gpu_count, exact=True)
    return Placement(nodes[:want], machine, args, notes, cluster, nodes)


def image_of(job: ValidJob) -> str:
    """The job's image (without --image, the submit path resolved it first: jobs/submit.py)."""
    if job.image_pending:
        raise RuntimeError("the default image is resolved (jobs/submit.py) before a cluster job is submitted")
    return job.image


@dataclass(frozen=True)
class Asked:
    """What `job submit` asked of a cluster besides the job itself."""

    recover: int | None = None  # --recover N
    detach: bool = False  # --detach: the cluster's own nodes follow the job
    wait: bool = False  # --wait
    agent: str | None = None  # --detach: the image the nodes' follower runs from (image/follower.py)


@dataclass(frozen=True)
class Put:
    """What a cluster's backend did with a job: its id, its summary (--format json), the one line `job
    submit` says of it, the notes it says whatever the format, and whether the submitter follows it now."""

    jid: JobId
    shown: dict
    line: str
    notes: list[str] = field(default_factory=list)
    follow: bool = False
