"""Benchmark: `cluster up` for 1, 8 and 64 nodes on the emulator with realistic latency, against the
seed guide's way (one instances.insert after another, waiting on each).

    python tests/bench/cluster_up.py [--latency-ms 100] [--op-seconds 3] [--sizes 1,8,64] [--naive 8,64]

Prints wall time and API calls for each; both ways run in the same process against the same emulator
settings, so the ratios are side by side. Every API call pays `latency-ms`; every operation takes
`op-seconds` from PENDING to DONE.
"""

from __future__ import annotations

import argparse
import statistics
import time

from google.cloud import compute_v1

from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.plan import plan
from gcpgpu.cluster.spec import ClusterSpec
from gcpgpu.fakes import Faults, mock_gcp
from gcpgpu.gcp.clients import Clients

PROJECT = "bench-proj"
MACHINE = "a3-highgpu-8g"


def gcpgpu_up(gcp, nodes: int) -> tuple[float, int]:
    gcp.reset_state()
    clients = Clients(emulator=gcp.address)
    p = plan(ClusterSpec(name=f"b{nodes}", machine_type=MACHINE, nodes=nodes).validate(default_region="us-central1"),
             PROJECT)
    gcp.requests.clear()
    t0 = time.perf_counter()
    Cluster(clients, PROJECT).up(p)
    return time.perf_counter() - t0, len(gcp.requests)


def seed_guide_up(gcp, nodes: int) -> tuple[float, int]:
    """The seed guide's loop: a placement policy, then one insert per VM, each waited on in turn."""
    gcp.reset_state()
    clients = Clients(emulator=gcp.address)
    gcp.requests.clear()
    t0 = time.perf_counter()
    policy = compute_v1.ResourcePolicy(name="seed-placement", group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
        collocation="COLLOCATED", vm_count=max(nodes, 2)))
    clients.compute("ResourcePoliciesClient").insert(project=PROJECT, region="us-central1",
                                                     resource_policy_resource=policy).result()
    insts = clients.compute("InstancesClient")
    for i in range(nodes):
        inst = compute_v1.Instance(
            name=f"seed-{i}", machine_type=f"zones/us-central1-a/machineTypes/{MACHINE}",
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image="projects/debian-cloud/global/images/family/debian-12"))],
            network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
            scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=False),
            resource_policies=["regions/us-central1/resourcePolicies/seed-placement"])
        insts.insert(project=PROJECT, zone="us-central1-a", instance_resource=inst).result()
    return time.perf_counter() - t0, len(gcp.requests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--op-seconds", type=float, default=3.0)
    ap.add_argument("--sizes", default="1,8,64")
    ap.add_argument("--naive", default="8,64", help="sizes to also create the seed guide's way")
    ap.add_argument("--repeat", type=int, default=1, help="runs per size (median reported)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    naive = [int(s) for s in args.naive.split(",") if s]

    faults = Faults(latency_ms=args.latency_ms, operation_seconds=args.op_seconds)
    with mock_gcp(faults=faults) as gcp:
        gcp.reset_state = lambda: gcp.compute.reset()  # keep the latency/op faults, drop resources
        print(f"emulator: {args.latency_ms:g} ms per API call, {args.op_seconds:g} s per operation; machine {MACHINE}")
        print(f"{'way':<22}{'nodes':>6}{'seconds':>10}{'API calls':>11}")
        ours: dict[int, float] = {}
        for n in sizes:
            runs = [gcpgpu_up(gcp, n) for _ in range(args.repeat)]
            secs = statistics.median(r[0] for r in runs)
            ours[n] = secs
            print(f"{'gcpgpu cluster up':<22}{n:>6}{secs:>10.2f}{runs[0][1]:>11}", flush=True)
        seed: dict[int, float] = {}
        for n in naive:
            secs, calls = seed_guide_up(gcp, n)
            seed[n] = secs
            print(f"{'one insert at a time':<22}{n:>6}{secs:>10.2f}{calls:>11}", flush=True)
    if 1 in ours:
        for n in sizes:
            if n != 1:
                print(f"gcpgpu: {n} nodes take {ours[n] / ours[1]:.2f}x the time of 1 node (target <= 1.5x)")
    for n in naive:
        if n in ours:
            print(f"gcpgpu is {seed[n] / ours[n]:.1f}x faster than one-by-one for {n} nodes (target >= 20x at 64)")


if __name__ == "__main__":
    main()
