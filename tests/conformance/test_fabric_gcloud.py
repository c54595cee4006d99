"""Issue 12/14's cluster features through gcloud, unchanged, against the emulator.

Flags are the installed gcloud's own (checked with `--help`): the GA track has `--network-profile`,
`routers nats create`, `--enable-private-ip-google-access`, `--max-run-duration`,
`--instance-termination-action` and `--reservation-affinity`; only the alpha track lists
`--provisioning-model=FLEX_START`, and no track has `--request-valid-for-duration` or an MRDMA
`nic-type` (those are covered by test_fabric_discovery.py). Skipped where gcloud is not installed.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")

ZONE = "us-central1-b"
REGION = "us-central1"


def _ok(result: tuple[int, str, str]) -> str:
    rc, out, err = result
    assert rc == 0, err
    return out


def _json(gcloud, command: str):
    return json.loads(_ok(gcloud(f"{command} --format=json")))


def test_router_nat_roce_network_and_private_google_access(gcloud, gcp):
    _ok(gcloud("gcloud compute networks create vpc --subnet-mode=custom"))
    _ok(gcloud(f"gcloud compute networks subnets create sub --network=vpc --region={REGION} --range=10.8.0.0/20 "
               "--enable-private-ip-google-access"))
    assert _json(gcloud, f"gcloud compute networks subnets describe sub --region={REGION}")["privateIpGoogleAccess"]
    _ok(gcloud(f"gcloud compute routers create rtr --network=vpc --region={REGION}"))
    _ok(gcloud(f"gcloud compute routers nats create nat --router=rtr --region={REGION} "
               "--auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges"))
    router = _json(gcloud, f"gcloud compute routers describe rtr --region={REGION}")
    (nat,) = router["nats"]
    assert (nat["name"], nat["natIpAllocateOption"], nat["sourceSubnetworkIpRangesToNat"]) == (
        "nat", "AUTO_ONLY", "ALL_SUBNETWORKS_ALL_IP_RANGES")
    nats = _json(gcloud, f"gcloud compute routers nats list --router=rtr --region={REGION}")
    assert [n["name"] for n in nats] == ["nat"]
    assert [r["name"] for r in _json(gcloud, "gcloud compute routers list")] == ["rtr"]
    _ok(gcloud(f"gcloud compute routers delete rtr --region={REGION} --quiet"))
    assert _json(gcloud, "gcloud compute routers list") == []
    # The RDMA VPC of A3 Ultra / A4: a network made with the zone's RoCE network profile.
    _ok(gcloud(f"gcloud compute networks create rdma --subnet-mode=custom --mtu=8896 "
               f"--network-profile={ZONE}-vpc-roce"))
    net = _json(gcloud, "gcloud compute networks describe rdma")
    assert net["networkProfile"].endswith(f"/global/networkProfiles/{ZONE}-vpc-roce")
    rc, _out, err = gcloud("gcloud compute networks create bad --subnet-mode=custom --network-profile=nowhere")
    assert rc != 0 and "networkProfile" in err


def test_a3_ultra_boot_disk_refused_and_a3_mega_topology(gcloud, gcp):
    rc, _out, err = gcloud(f"gcloud compute instances create u --zone={ZONE} --machine-type=a3-ultragpu-8g "
                           "--boot-disk-type=pd-balanced --maintenance-policy=TERMINATE --no-address")
    assert rc != 0 and "[pd-balanced, a3-ultragpu-8g] features are not compatible for creating instance." in err
    _ok(gcloud(f"gcloud compute resource-policies create group-placement compact --collocation=COLLOCATED "
               f"--region={REGION}"))
    policy = _json(gcloud, f"gcloud compute resource-policies describe compact --region={REGION}")
    assert "vmCount" not in policy["groupPlacementPolicy"]
    _ok(gcloud(f"gcloud compute instances create m-1 m-2 --zone={ZONE} --machine-type=a3-megagpu-8g "
               "--maintenance-policy=TERMINATE --no-address --resource-policies=compact"))
    tops = [_json(gcloud, f"gcloud compute instances describe {n} --zone={ZONE}")["resourceStatus"]
            ["physicalHostTopology"] for n in ("m-1", "m-2")]
    assert tops[0]["block"] == tops[1]["block"] and tops[0]["host"] != tops[1]["host"]
    assert set(tops[0]) >= {"cluster", "block", "subblock", "host"}


def test_flex_start_vm_through_the_alpha_track(gcloud, gcp):
    # gcloud has no --request-valid-for-duration, so its FLEX_START insert does not queue: with no
    # capacity it fails at once (a zero window), and succeeds once capacity is there. Queueing
    # (PENDING, then RUNNING) is driven through googleapiclient in test_fabric_discovery.py.
    gcp.faults.set_capacity(ZONE, "a3-highgpu-8g", 0)
    create = (f"gcloud alpha compute instances create flex --zone={ZONE} --machine-type=a3-highgpu-8g "
              "--provisioning-model=FLEX_START --max-run-duration=4h --instance-termination-action=DELETE "
              "--reservation-affinity=none --on-host-maintenance=TERMINATE --no-address")
    rc, _out, err = gcloud(create)
    assert rc != 0 and "ZONE_RESOURCE_POOL_EXHAUSTED" in err
    gcp.faults.set_capacity(ZONE, "a3-highgpu-8g", 1)
    _ok(gcloud(create))
    got = _json(gcloud, f"gcloud compute instances describe flex --zone={ZONE}")
    sched = got["scheduling"]
    assert (got["status"], sched["provisioningModel"], sched["instanceTerminationAction"],
            sched["maxRunDuration"]) == ("RUNNING", "FLEX_START", "DELETE", {"seconds": "14400"})
    assert got["reservationAffinity"]["consumeReservationType"] == "NO_RESERVATION"
