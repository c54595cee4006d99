"""gcpgpu: GPU training clusters, jobs, containers and metrics on Google Cloud.

Rooms (README "Layout"; tests/test_layering.py keeps which may import which):
  cli/        the `gcpgpu` command: click groups, one module each, loaded lazily
  cluster/    clusters: spec -> plan -> apply, the node model, autostop, reservations, cost
  jobs/       training jobs on a cluster or on Vertex AI: submit, status, logs, recovery, retries
  costs/      what clusters and jobs cost, after they are gone too: the cost report and its records
  metrics/    GPU and trainer metrics from Cloud Monitoring: tail, report, dashboards
  image/      the training image: Cloud Build of the base image, the user's layer, the default image
  storage/    shared file systems beside the GPUs: Filestore, Managed Lustre, Hyperdisk ML
  gcp/        the one place that builds Google clients, error classes, operations
  pricing/    node prices per region and provisioning: the Cloud Billing Catalog, cached, or the bundled table
  node/       what a node or the image runs: the preflight, the workspace, the reporter, the follower
  slurm/      what a Slurm cluster's nodes run: its configuration, daemons, queue and tasks
  trainer/    the bundled GPT trainer (torch only)
  nccl/       the NCCL environment per machine and platform
  fakes/      the offline emulator of Google's APIs (tests and `gcpgpu emulator`)
The shared base, modules both sides use:
  catalog.py    the GPU machine catalog over gcpgpu/data/machines.yaml
  errors.py     the tool's exception types, and Google's API errors in one line
  output.py     results as a table for people, JSON or YAML for programs (--format)
  settings.py   the global options, project/region/zone resolved only when a command asks
  specfile.py   -f spec files and KEY=VALUE options, read alike by `cluster` and `job`
  times.py      durations and RFC 3339 timestamps: one grammar, one reader
  resources.py  where templates/ and containers/ are (installed or in a checkout), and rendering
  nodeagent.py  kept for one release: the old name of gcpgpu.node.agent, for nodes of an older gcpgpu
"""

__version__ = "0.1.0"
