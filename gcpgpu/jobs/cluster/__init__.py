"""The cluster target: jobs on a gcpgpu cluster's VMs, as SkyPilot keeps each provider's verbs in a folder.

backend.py    the cluster target's verbs, each handed to the backend of the cluster's scheduler
agent.py      the backend of a cluster without a scheduler: gcpgpu's job agent on each node, one job at a time
slurm.py      the backend of a Slurm cluster: jobs queued in the records, handed to sbatch by node 0's agent
record.py     JobRecord: the one definition of what is stored of a cluster job (node, project, pending)
store.py      the cluster's job records in project metadata: read, opened, advanced by the job's leader
journal.py    a recovery written down before its first step, so the next follower can finish it
view.py       the one rule every view reads a job by: its record, and what its nodes report now
placement.py  where a job goes: the cluster's nodes, read once, and the trainer fitted to them
deliver.py    the node record, each attempt of it, and putting it on the nodes with their agent script
nodes.py      the nodes' reads and writes: the job in instance metadata, the agents' guest attributes
follower.py   who follows a cluster's job, and from where: one leader at a time
recover.py    the Follower: a job followed to its end, recovered when a node is lost
restart.py    the follower's guard: retries, stalls and webhooks
stall.py      stall detection from the job's log, and the stacks captured before it is stopped
ahead.py      ends a follower sees coming (a run's set end, host maintenance)
loss.py       why a node was lost, as Compute tells it
spent.py      what a job has run and cost so far
spendcap.py   a job's --max-spend: warned at 80 %, stopped (checkpoint first) at its cap, by its follower
"""
