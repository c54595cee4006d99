"""slurm.conf, gres.conf and topology.conf as a Slurm cluster's nodes render them (gcpgpu/slurm/conf.py)."""

from __future__ import annotations

import dataclasses
import re

from gcpgpu.slurm import conf


def _layout(emulated: bool, topology=None, port_base=None) -> conf.Layout:
    nodes = conf.slurm_nodes("q", "a3-highgpu-8g", 3, topology, port_base)
    return conf.Layout("q", "localhost" if emulated else "q-0", nodes, "/s/state", "/s/spool", "/s/run", "/s/log",
                       controller_port=port_base or conf.CONTROLLER_PORT, emulated=emulated,
                       munge_socket="/tmp/m.sock" if emulated else None, node_host="127.0.0.1" if emulated else None,
                       gpu_dir="/s/gpus" if emulated else "/dev")


def _lines(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(key)]


def test_each_node_has_the_catalogs_cpus_memory_and_gpus_and_the_emulators_own_port():
    text = conf.slurm_conf(_layout(emulated=True, port_base=30000))
    nodes = _lines(text, "NodeName=")
    assert [line.split()[0] for line in nodes] == ["NodeName=q-0", "NodeName=q-1", "NodeName=q-2"]
    assert all("CPUs=208 " in line and "Gres=gpu:8" in line for line in nodes)  # a3-highgpu-8g in the catalog
    assert [re.search(r"Port=(\d+)", line)[1] for line in nodes] == ["30001", "30002", "30003"]
    assert "SlurmctldPort=30000" in text and "AuthInfo=socket=/tmp/m.sock" in text
    assert "SlurmdParameters=config_overrides" in text  # one host stands in for three 208-vCPU VMs


def test_a_real_node_uses_slurms_ports_its_own_name_and_the_nvidia_devices():
    lay = _layout(emulated=False)
    text = conf.slurm_conf(lay)
    assert "SlurmctldHost=q-0" in text and "SlurmctldPort=6817" in text
    assert not re.search(r"Port=\d+ CPUs", text) and "NodeHostname" not in text and "AuthInfo" not in text
    assert "config_overrides" not in text
    gres = _lines(conf.gres_conf(lay), "NodeName=q-1")
    assert gres == [f"NodeName=q-1 Name=gpu File=/dev/nvidia{i}" for i in range(8)]


def test_priorities_are_partitions_and_only_low_jobs_are_preempted_by_requeue():
    parts = {line.split()[0].split("=")[1]: line for line in _lines(conf.slurm_conf(_layout(True, port_base=1)),
                                                                     "PartitionName=")}
    assert list(parts) == ["high", "normal", "low"]
    assert "PriorityTier=3" in parts["high"] and "PriorityTier=1" in parts["low"]
    assert "PreemptMode=REQUEUE" in parts["low"] and "PreemptMode=OFF" in parts["normal"]
    assert "Default=YES" in parts["normal"]


def test_only_gcpgpus_submitter_may_use_any_partition():
    """Any user with a munge credential (a user on a node, a job's own process) could submit to `high` and
    preempt the cluster's `low` jobs: every partition now names the one group that may run jobs in it, the
    queue agent's (root's on a real node; Slurm lets root use any partition whatever it says)."""
    text = conf.slurm_conf(_layout(emulated=False))
    partitions = _lines(text, "PartitionName=")
    assert len(partitions) == 3 and all(" AllowGroups=root " in line for line in partitions)
    emulated = conf.slurm_conf(dataclasses.replace(_layout(emulated=True), submitters="emu"))
    assert all(" AllowGroups=emu " in line for line in _lines(emulated, "PartitionName="))


def test_topology_groups_nodes_by_sub_block_under_their_block():
    topo = {"q-0": ("b1", "s1"), "q-1": ("b1", "s2"), "q-2": ("b1", "s1")}
    text = conf.topology_conf(_layout(True, topo, port_base=1))
    switches = _lines(text, "SwitchName=")
    assert switches == ["SwitchName=subblock0 Nodes=q-0,q-2", "SwitchName=subblock1 Nodes=q-1",
                        "SwitchName=block0 Switches=subblock0,subblock1"]


def test_nodes_compute_places_nowhere_still_reach_every_other_node():
    text = conf.topology_conf(_layout(True, {"q-0": ("b1", "s1")}, port_base=1))
    assert _lines(text, "SwitchName=unplaced") == ["SwitchName=unplaced Nodes=q-1,q-2"]
    assert _lines(text, "SwitchName=root") == ["SwitchName=root Switches=block0,unplaced"]
