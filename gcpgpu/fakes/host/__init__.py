"""The machine under the emulated VMs: how the emulator runs, confines and ends their processes here.

Every emulated node and Vertex AI replica is processes on this one machine, on 127.0.0.1, and every disk,
bucket and shared file system is a folder under the emulator's storage root. This room holds that
machinery; what runs on it is said by the rooms above (jobs/: the job agent, Vertex AI's replicas; the
per-VM programs), which it never imports (tests/fakes/test_layering.py).

runner.py         starts a run's replicas as local processes, each in its own session, captures their
                  output line by line with timestamps (what Cloud Logging serves), stops them (SIGTERM,
                  SIGKILL after a grace) and reports how each ended; sidecars (the metrics reporter) beside.
procs.py          a replica's processes as /proc shows them: how each starts (spawn), every descendant by
                  (pid, start time), group signals, and SIGKILLs that never hit a pid reused since.
forked.py         gcpgpu's own Python helpers (node agent, Slurm node, reporter, torchrun) forked from a
                  forkserver that imported them once, instead of started as fresh interpreters.
lastwords.py      a failed container's last words: a launcher's banners left out, a SIGKILL said as such.
sandbox.py        users' own commands through the image's entrypoint inside bubblewrap: an unprivileged
                  user without capabilities, /gcs and every mount bound by descriptor, never through a link.
peers.py          who sent a request: a sandboxed command (its socket held in another pid namespace) or not.
storage.py        the emulator's storage root: the paths a job names (gs://, /gcs/, a node's own paths)
                  mapped to folders that outlive it, never outside the root (PathRefused).
mounts.py         a job's --mount of a bucket that does not exist, failed in the words of gcsfuse or of
                  the image's entrypoint.
shared_mounts.py  a node's shared file systems (`gcpgpu-storage` metadata: Filestore, Lustre, Hyperdisk
                  ML) resolved to their folders, and the rates a node's diagnostics measure on them.
tunnel.py         the stand-in for IAP TCP forwarding: the one way to a node's ports (its sshd) on 127.0.0.1.
nsexec.py         `docker exec` on an emulated node: a command entered into a running job's sandbox (nsenter).
ports.py          loopback ports for what emulated nodes listen on, picked below the ephemeral range.
supervisor.py     one process per emulated VM that lives and dies with it, as a systemd service does: the
                  one watcher the node agents and the Slurm daemons share.
"""
