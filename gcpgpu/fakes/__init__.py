"""An offline Google Cloud emulator that speaks the real wire formats (in the spirit of moto).

    with gcpgpu.fakes.mock_gcp() as gcp:        # in-process, on a free loopback port
        ...code that builds real Google clients...
        gcp.faults.stockout("us-central1-a", "a3-highgpu-8g")

`gcpgpu emulator start --port 8085` serves the same backends until stopped. The tool never imports
this package outside tests and that command.

One room per Google service, each with its state (backend.py) apart from its wire formats (rest.py,
service.py for gRPC):
  compute/            Compute Engine: instances, reservations, disks, networks, operations; getGuestAttributes
  vertex/             Vertex AI custom jobs, run as local processes when they can be
  storage/            Cloud Storage's JSON API over the one storage folder every service and job shares
  logging/            Cloud Logging's entries.list, over what local runs printed
  monitoring/         Cloud Monitoring: time series (written and made up) and dashboards
  cloudbuild/         Cloud Build: builds validated and timed, never run
  artifactregistry/   Artifact Registry: the images Cloud Build pushed
  secretmanager/      Secret Manager v1: secrets and their versions
  filestore/          Filestore instances (NFS shares), served under /filestore/v1/
  lustre/             Managed Lustre instances, served under /lustre/v1/
  servicenetworking/  private service access connections, served under /servicenetworking/v1/
  billing/            the Cloud Billing Catalog: Compute Engine's GPU-family SKUs from a dated snapshot
What the emulated machines run, in three rooms stacked one way:
  host/               the machine under the VMs: process runner, sandbox, storage folders, mounts, ports,
                      the per-VM supervisor
  guest/              inside each VM: the follower and the Slurm daemons, and the reports its scripts write
  jobs/               the jobs themselves: the cluster job agent, the Slurm nodes' container engine
Shared by them all:
  server.py           the emulator as a process: the WSGI app, the gRPC server, the state file, the
                      backends wired in one constructor, mock_gcp()
  core.py             errors in Google's wire shape, faults, ids, the request log
  world.py            the default world (regions, zones, machine types), loaded from data/
  clock.py            the emulator's clock, which a test sets forward, stops or runs faster
  faults.py           the fault clock: armed node losses and maxRunDuration ends, fired when due
  events.py           what happens to a VM that another part must act on (metadata set, VM lost)
  activity.py         what runs where: the job runners write it, Monitoring reads it
  filters.py          the AIP-160 filter grammar Vertex AI and Cloud Logging share
  partial.py          partial responses (the `fields` parameter) for every REST API
  schema.py           request bodies checked against each REST API's published discovery document
  routes.py           which module answers each REST path (server.py loads them); HTTP batches of them
  lro.py              long-running operations of the one-platform APIs (Filestore, Lustre, Networking)
  managed.py          managed file-system instances behind operations: what Filestore and Lustre share
  gate.py             the front door every HTTP request passes: loopback Host, own Origin, bounded bodies
  http_server.py      waitress on 127.0.0.1 with a bounded number of threads
  grpc_service.py     the plumbing the gRPC services share
  engine_call.py      what a Slurm task runs in place of `docker run`: one call to jobs/slurm_engine.py
  pytest_plugin.py    the `gcp` fixture: a clean emulator per test
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Faults
    from .server import Emulator, mock_gcp

__all__ = ["Emulator", "Faults", "mock_gcp"]


def __getattr__(name: str):
    # Lazy: importing the package (e.g. for the pytest plugin) should not start werkzeug or grpc.
    if name in ("Emulator", "mock_gcp"):
        from . import server

        return getattr(server, name)
    if name == "Faults":
        from .core import Faults

        return Faults
    raise AttributeError(name)
