"""Slurm on a gcpgpu cluster's nodes (`cluster up --scheduler slurm`): node-side code only.

conf.py    slurm.conf, topology.conf and gres.conf, rendered from what the cluster says about itself.
node.py    what each node runs: munged with the cluster's key (from Secret Manager), slurmctld on
           node 0, slurmd under the node's own name; it lives and dies with the VM.
keeper.py  node 0 keeps the cluster whole: a lost node is marked DOWN (Slurm requeues its jobs) and
           brought back.
queue.py   node 0's queue agent: hands queued jobs to sbatch and writes back what Slurm says of them.
requeue.py what the queue agent writes of a requeue (a preemption, a node loss): the job's history entry and
           RECOVERING until it runs again.
task.py    one node's task of a gcpgpu job run by Slurm (`python -m gcpgpu.slurm.task JOB.json`, from the
           batch script): the job's container, as the node's job agent runs it.

Where slurmctld runs: on node 0, not on a controller VM of its own. The clusters this is for are
reserved ones (calendar or DENSE reservations) that outlive their jobs: their node 0 goes away only
to a host error or a `cluster down`, and recovery re-creates it under its name. A controller VM
would add a machine type, quota, an image and a failure of its own to every cluster for the one
case (a Spot cluster losing node 0). The price: while node 0 is away the queue is too. It waits on
the cluster's Slurm state disk (StateSaveLocation; gcpgpu/cluster/slurm_state.py), which `up` attaches
to node 0 and to any node 0 made again under its name, so the new node 0 reads the queue back (on the
emulator too: node 0's slurmctld keeps its state in the disk's folder). The laptop never talks to these
daemons: it reaches them through Google's APIs only (instance metadata and guest attributes), as every
gcpgpu job does.
"""
