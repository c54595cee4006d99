"""GPU clusters: spec (validated input) -> plan (resources, pure) -> apply (through the Compute API).

spec.py            ClusterSpec: flags and/or a YAML file, validated before any API call
plan.py            plan(spec): every resource a cluster needs, as the Compute API's JSON, with no client
hosttuning.py      the host TCP settings the startup script applies (the seed's), and the plan's line about them
apply.py           bring a planned cluster up, reconciling with what exists; failover across zones
session.py         one attempt at changing a cluster: clients, lease, roll-back, reporter
lease.py           one `up` or `down` at a time per cluster, across machines: a lease in project metadata
observe.py         what exists in GCP for a cluster, found from labels and names: the one node model
names.py           how a cluster and its resources are named, and how they say whose they are
unknown.py         a cluster name that matches nothing: one line, with "did you mean" the names one edit away
kinds.py           the kinds of resource a cluster is made of, in the order GCP creates and deletes them
down.py            `down`, and `down --nodes N` (shrink)
teardown.py        deleting what was observed, in GCP's order, past every failure
nat.py             the Cloud NAT a region's network shares between clusters
flex.py            flex-start nodes: one insert per node, each waiting for capacity
reservations.py    reservations as A3 Ultra, A4 and A4X capacity is sold: blocks and sub-blocks
reservation_use.py consuming a reservation with `up --reservation`, read and checked first
topology.py        node ranks in fabric order: a sub-block's nodes, then a block's, adjacent
ranks.py           the rank labels, and their repair when a re-run of `up` finds them wrong
bootlabels.py      rank labels sent while the nodes boot, off `up`'s critical path
cost.py            what a cluster has run and cost so far, from what Compute reports on each node
spend.py           a cluster's spend cap (up --max-spend) as its nodes carry it, and how near it is
autostop.py        a cluster that has run no job for a while stops (or deletes) itself; `cluster autostop`
autostop_setting.py the autostop as the nodes carry it (read by observe.py without what acts on it)
doctor.py          `cluster doctor`: is every node ready to train?
diagnose.py        `doctor --active` and `up --check`: each node proved healthy before training on it
check.py           `up --check`: active diagnostics before the cluster is declared up
repair.py          `cluster repair`: a bad host taken out from under one node, its name and rank kept
ssh.py             `cluster ssh`: a node through IAP TCP forwarding
tunnel.py          a node's port through IAP on either target: gcloud's tunnel, or the emulator's (ssh's ProxyCommand)
keys.py            the ssh key gcpgpu logs in with, and its line in the project's `ssh-keys` metadata
nodessh.py         plain OpenSSH to a node through IAP: the options --all, ssh-config and attach share
fanout.py          `cluster ssh --all/--nodes`: one command on many nodes at once, lines by rank, a summary
forward.py         `cluster forward`: a node's port on localhost through IAP until Ctrl-C
sshconfig.py       `cluster ssh-config`: Host entries per node, kept in ~/.ssh/config between markers
shared_fs.py       the cluster's shared file systems (gcpgpu/storage) in `up`, `down` and a roll-back; what a re-run keeps
holdings.py        what a cluster holds besides nodes (file systems, disks, scheduler), as status/list/down name it
slurm_state.py     a Slurm cluster's own pieces: what its nodes carry, and its state disk
munge.py           a Slurm cluster's munge key, kept in Secret Manager
"""
