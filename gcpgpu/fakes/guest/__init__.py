"""Inside each emulated VM: what gcpgpu's bootstrap makes a node run and report, read from its metadata.

A real node runs programs as systemd services (the follower, the Slurm daemons) and scripts that write
guest attributes (the startup report, active diagnostics, a Hyperdisk ML loader's copy). Here the
programs are local processes kept with their VM by the host's per-VM supervisor (host/supervisor.py), and
the scripts' reports are worked out when instances.getGuestAttributes reads them
(compute/guest_attributes.py). The job agent, which runs the jobs themselves, is the jobs room's
(jobs/agent.py). Nothing here imports jobs/ (tests/fakes/test_layering.py).

node_agent.py  the follower each node with `gcpgpu-agent` runs (gcpgpu.node.agent), pointed at this emulator.
slurm.py       the Slurm daemons (munged, slurmctld, slurmd) of each node of a `--scheduler slurm`
               cluster: each cluster's folder and ports, node 0's state on its state disk.
sshd.py        each node's real OpenSSH server (sshd -i per connection, in the node's sandbox), keys from metadata.
health.py      the startup script's report on the node (gcpgpu-node/): driver, GPUs, GPU NICs, links,
               GPUDirect, following the machine type; a test makes a node lack one.
diag.py        active diagnostics (gcpgpu-diag/) when metadata asks: dcgmi, NVLink and NIC bandwidth,
               the cross-node all_reduce, broken by the world's gpu_fault and slow_nic faults.
nics.py       each node's NICs (host gVNICs, the family's GPU NICs, RDMA devices on A3 Ultra/A4) and their
              counters as a fake sysfs on the node's disk, following its job's steps and the slow_nic fault.
loader.py      a Hyperdisk ML loader VM's copy of a bucket prefix onto its disk (gcpgpu-loader/).
reports.py     every report above for one VM, and what must happen once (a loader's copy, one measure of
               the shared mounts per diagnostics request, the host each fault is in).
"""
