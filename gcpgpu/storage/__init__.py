"""Shared file systems next to the GPUs: Filestore (NFS), Managed Lustre and Hyperdisk ML.

A room on the user's machine below cluster/: what the user may ask for (tiers.py, spec.py), and the
verbs that create, find, attach and delete it through Google's clients (apply.py). Every node learns
its mounts from one metadata key, `gcpgpu-storage` (entries.py), that the startup script mounts and the
emulator binds.
"""
