"""The emulator's per-node fake sysfs (fakes/guest/nics.py) read by the same code that reads a real node's /sys
(gcpgpu.node.nics): each family's NIC set and roles, counters that follow the job's steps, idle near zero, and
the slow_nic fault as a slow NIC with rising retransmissions and CNPs."""

from __future__ import annotations

import pytest

from gcpgpu import catalog, nccl
from gcpgpu.fakes.activity import Activity
from gcpgpu.fakes.core import Clock, Faults
from gcpgpu.fakes.guest.nics import NicTraffic, nic_set
from gcpgpu.node import nics

JOB = "cluster/p/train-1"


@pytest.mark.parametrize(("machine_type", "fabric", "host", "rdma"), [
    ("a3-ultragpu-8g", 8, 2, True), ("a4-highgpu-8g", 8, 2, True), ("a3-megagpu-8g", 8, 1, False),
    ("a3-highgpu-8g", 4, 1, False), ("a2-highgpu-1g", 0, 1, False)])
def test_each_family_shows_its_own_nics_with_their_roles(tmp_path, machine_type, fabric, host, rdma):
    clock = Clock()
    traffic = NicTraffic(Activity(clock), lambda: Faults(), clock)
    traffic.track("1", "c-0", machine_type, JOB, 2, [], tmp_path)
    readings, tcp = nics.read(tmp_path, machine_type)
    roles = {r.nic: r.role for r in readings}
    assert sum(role == "fabric" for role in roles.values()) == fabric, roles
    assert sum(role == "host" for role in roles.values()) == host, roles
    assert (tmp_path / "sys/class/infiniband").is_dir() == rdma  # RDMA devices only on the RDMA families
    assert tcp == 0.0
    machine = catalog.machine_types()[machine_type]
    if fabric and not rdma:  # the GPU gVNICs are the ones gcpgpu's NCCL profile names
        assert {n for n, r in roles.items() if r == "fabric"} == set(nccl.interface_names(machine, "vm").gpu)


def test_counters_follow_the_steps_and_a_slowed_nic_retransmits(tmp_path):
    clock = Clock()
    activity = Activity(clock)
    faults = Faults()
    traffic = NicTraffic(activity, lambda: faults, clock)
    roots = {name: tmp_path / name for name in ("c-0", "c-1")}
    for i, (name, root) in enumerate(roots.items()):
        traffic.track(str(i), name, "a3-ultragpu-8g", JOB, 2, ["--parallel", "ddp"], root)
    traffic._params[JOB] = 1e6  # the trainer's "model ... (1.0M params" line
    t0 = clock.now()
    activity.progress(JOB, 0, at=t0)

    def sample(name):
        return (clock.now(), *nics.read(roots[name], "a3-ultragpu-8g"))

    before = {n: sample(n) for n in roots}
    clock.advance(10)
    activity.progress(JOB, 100, at=clock.now())  # 100 steps in 10 s
    traffic.tick()
    rates = {n: nics.rates(before[n], sample(n)) for n in roots}
    per_node = 2 * (2 - 1) / 2 * 4 * 1e6 * 100 / 10  # ring all-reduce of fp32 gradients, bytes/s
    for n in roots:
        fabric = sum(v["sent_bytes_per_s"] for (nic, role), v in rates[n].items() if role == "fabric")
        host = sum(v["sent_bytes_per_s"] for (nic, role), v in rates[n].items() if role == "host")
        assert fabric == pytest.approx(per_node + 8 * nics_idle(), rel=0.05)  # the sample times, a moment apart
        assert host < 1e4  # the host gVNICs carry no collective traffic on an RDMA family
        assert all(v.get("retrans_per_s", 0) == 0 and v.get("cnp_per_s", 0) == 0 for v in rates[n].values())

    faults.update({"slow_nic": ["c-1"]})
    before = {n: sample(n) for n in roots}
    clock.advance(10)
    activity.progress(JOB, 200, at=clock.now())
    traffic.tick()
    slow = nics.rates(before["c-1"], sample("c-1"))
    fine = nics.rates(before["c-0"], sample("c-0"))
    assert slow[("mlx5_2", "fabric")]["sent_bytes_per_s"] < 0.2 * fine[("mlx5_2", "fabric")]["sent_bytes_per_s"]
    assert slow[("mlx5_2", "fabric")]["retrans_per_s"] > 0 and slow[("mlx5_2", "fabric")]["cnp_per_s"] > 0
    assert fine[("mlx5_2", "fabric")]["retrans_per_s"] == 0


def test_idle_nodes_move_next_to_nothing(tmp_path):
    clock = Clock()
    traffic = NicTraffic(Activity(clock), lambda: Faults(), clock)
    traffic.track("1", "c-0", "a3-megagpu-8g", JOB, 2, [], tmp_path)
    first = (clock.now(), *nics.read(tmp_path, "a3-megagpu-8g"))
    clock.advance(30)
    traffic.tick()
    rates = nics.rates(first, (clock.now(), *nics.read(tmp_path, "a3-megagpu-8g")))
    assert all(v.get("sent_bytes_per_s", 0) <= 1.01 * nics_idle() for v in rates.values()), rates
    assert [n.name for n in nic_set("a3-megagpu-8g")][0] == "enp0s12"


def nics_idle() -> float:
    from gcpgpu.fakes.guest.nics import IDLE_BPS

    return IDLE_BPS
