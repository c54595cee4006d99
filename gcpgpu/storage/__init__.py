"""Shared file systems next to the GPUs: Filestore (NFS), Managed Lustre and Hyperdisk ML.

A room on the user's machine below cluster/: what the user may ask for (tiers.py, spec.py), and the
verbs that create, find, attach and delete it through Google's clients (apply.py). Every node learns
its mounts from one metadata key, `gcpgpu-storage` (entries.py), that the startup script mounts and the
emulator binds.

tiers.py     every figure a shared file system is checked against: one table per service, with its source.
spec.py      what the user asked for: new file systems (--filestore, --lustre, --hyperdisk-ml) and
             existing ones to attach (--mount KIND:NAME:/PATH), checked before any request.
sizing.py    `gcpgpu plan storage`: the tier and size a training run needs.
apply.py     create, find, attach and delete a cluster's shared file systems through Google's clients.
access.py    private service access on the cluster's network, which Managed Lustre needs.
disks.py     standalone zonal disks a cluster owns: find, make, attach, detach and delete one.
hyperdisk.py a Hyperdisk ML volume filled from a bucket prefix by a loader VM.
entries.py   the `gcpgpu-storage` instance metadata: what each node mounts, and where.
rates.py     `cluster doctor --active` on shared file systems: each node's measured rates against the
             tier's promise.
"""
