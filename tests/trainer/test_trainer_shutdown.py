"""Issue 24 item 7: a successful multi-node job ends without a C++ "TCPStore ... Did the remote server shutdown
or crash?" trace.

Under torchrun the job's TCPStore lives in node 0's agent, which closes it once its workers have exited and
the agents' exit barrier is done. When node 0's agent reached that barrier first, it could leave (and close
the store) while another node's agent was still asking the store whether the barrier was done: that agent
printed the trace (1 job in 3 on the emulator). The trainer now leaves in order, rank 0 last, after every
other node's agent has checked in, so node 0's agent always arrives last. Here two torchrun agents ("nodes")
run the trainer on CPU with gloo, node 1's worker made slow to exit so that, left to chance, node 0's agent
would arrive first.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys

import pytest
from _trainer_helpers import TINY, base_env, free_port

WRAPPER = """\
import os, sys, time
from gcpgpu.trainer.train import main
code = main(sys.argv[1:])
if os.environ.get("RANK") == "1":
    time.sleep(3.0)  # a worker slow to exit (a big model's memory to free): its node reaches the barrier late
sys.exit(code)
"""
# torchelastic's agent logs (LOGLEVEL=INFO), glog style: "I1125 02:09:33.116573 1234 .../api.py:985] Local worker
# group finished (SUCCEEDED). Waiting ..." when its workers are done and it enters the exit barrier.
ARRIVED = re.compile(r"^I\d{4} (\d\d:\d\d:\d\d\.\d+) .*Local worker group finished \((?:WorkerState\.)?SUCCEEDED\)", re.M)


def _arrived(output: str) -> dt.time:
    match = ARRIVED.search(output)
    assert match, output[-3000:]
    return dt.time.fromisoformat(match.group(1)[:15])


@pytest.mark.multiprocess
def test_two_nodes_end_in_order_without_a_tcpstore_trace(small_text, tmp_path):
    script = tmp_path / "train_then_linger.py"
    script.write_text(WRAPPER)
    port = str(free_port())
    args = [*TINY, "--data", str(small_text), "--steps", "2", "--parallel", "ddp", "--quiet"]
    env = base_env({"LOGLEVEL": "INFO", "GCPGPU_TRAINER_ALLOW_CPU": "1"})
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(rank),
                               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port,
                               "--monitor-interval", "0.1", str(script), *args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [p.communicate(timeout=240)[0] for p in nodes]
    for rank, (proc, output) in enumerate(zip(nodes, outputs, strict=True)):
        assert proc.returncode == 0, f"node {rank}:\n{output[-3000:]}"
        assert "frame #" not in output and "Error waiting on exit barrier" not in output, f"node {rank}:\n{output}"
    # Node 0's agent (the store's host) reached the exit barrier after node 1's, though node 1's worker was slow.
    assert _arrived(outputs[1]) < _arrived(outputs[0]), outputs
