"""A process that lives and dies with its emulated VM, as a systemd service does on a real node.

Both per-VM programs the emulator runs for its nodes (node_agent.py: gcpgpu's follower; slurm.py: the
Slurm daemons) keep one run per instance id and, on each scan of Compute's instances, do the same with it:
a VM that is STOPPING has its process SIGTERMed (once), then SIGKILLed after the grace; a VM that is
no longer RUNNING (stopped, deleted, preempted, a host error) loses it at once (SIGKILL to the whole tree);
a process that exited while its VM runs is forgotten after `restart_s` (systemd's RestartSec), so the
scan starts it again.
"""

from __future__ import annotations

import time

from .runner import Runner


def keep_with_vms(runner: Runner, runs: dict[str, tuple[str, str, str]], ended: dict[str, float],
                  status: dict[str, str], grace_s: float, restart_s: float) -> None:
    """One scan's changes to `runs` (instance id -> (run id, project, name)), given each live instance's
    `status` (instance id -> Compute's status; an instance not in it is gone). `ended`: instance id -> when
    its process was first seen ended (kept between scans). The caller holds its lock."""
    for iid, (run_id, _project, name) in list(runs.items()):
        now = status.get(iid)
        if now == "STOPPING":  # shutting down: SIGTERM now (once), SIGKILL after the grace
            runner.lose(run_id, grace_s, f"node {name} is stopping")
            continue
        if now != "RUNNING":
            runner.lose(run_id, 0.0, f"node {name} is no longer RUNNING")
            del runs[iid]
            continue
        run = runner.get(run_id)
        if run is not None and run.done:
            seen = ended.setdefault(iid, time.monotonic())
            if time.monotonic() - seen >= restart_s:
                del runs[iid]
                ended.pop(iid, None)


def alive(runner: Runner, runs: dict[str, tuple[str, str, str]]) -> dict[str, str]:
    """Instance name -> run id of each process of `runs` alive now."""
    return {name: run_id for run_id, _p, name in list(runs.values())
            if (run := runner.get(run_id)) is not None and not run.done}
