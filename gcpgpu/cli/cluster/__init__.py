"""`gcpgpu cluster`, one module per part (nothing here: `gcpgpu --help` reads the group's summary from group.py).

group     the `cluster` group and its lifecycle commands: plan, up, down, status, list; the columns they show
flags     the flags `up` and `plan` share, and the ClusterSpec they build from them
storage   `up` and `plan`'s shared file system flags (--filestore, --lustre, --hyperdisk-ml, --mount)
autostop  `cluster autostop`, and `up`'s --autostop, --down and --notify
nodes     working on the nodes: `cluster ssh` (one node, --all, --nodes), `cluster forward`, `cluster ssh-config`
doctor    node health: `cluster doctor` (with --active, diagnostics on the nodes) and `cluster repair`
"""
