"""A failed container's last words, as a node's job agent reports them (templates/job_agent.sh.j2 does the
same on a real node): never a launcher's banner, and a SIGKILL (the kernel's OOM killer) said as such."""

from __future__ import annotations

import re
import signal
from typing import Any

# What a launcher prints around a worker's failure (torchrun's ChildFailedError report, its glog line, a
# traceback's indented frames): never a replica's last words, which a failure message quotes.
_BANNER = re.compile(r"^(?:\s.*|=+|-+|\[\d+\]:|Failures:|Root Cause.*|\S+ FAILED|<NO_OTHER_FAILURES>|"
                     r"Traceback \(most recent call last\):|.*ChildFailedError.*|.*a worker failed.*|"
                     r"[EWI]\d{4} .*\] failed \(exitcode: -?\d+\).*)$")


# The image's entrypoint's notes around the command (where it runs, its checkpoint folder, its uploads): only
# its refusals to run the command (jobs/logs.py) say why a replica ended.
_NOTE = re.compile(r"^gcpgpu-entrypoint: ")
# Its refusals, as the tool reads them (jobs/logs.py's entrypoint_refusal; fakes/ imports nothing of the tool,
# so the pattern is said again here, and tests/test_job_own_command.py holds the two to the same lines).
_REFUSAL = re.compile(r"^gcpgpu-entrypoint: (?:setup failed \(exit \d+\): |GCPGPU_[A-Z_]+: |secret [A-Za-z_]\w* \(|"
                      r"cannot run )")


def banner(text: str) -> bool:
    """True for a line that is never a replica's last words: a launcher's report (banners, its table, a
    traceback's frames) or the entrypoint's note beside the command (not its refusal to run it)."""
    line = text.rstrip()
    return bool(_BANNER.match(line)) or (bool(_NOTE.match(line)) and not _REFUSAL.match(line))


KILLED = "killed (out of memory?)"
# torchrun's report of a worker that died of SIGKILL (the kernel's OOM killer sends it): its table's
# "rank : R" and "exitcode : -9" lines, or the traceback line it writes for a signal.
_TABLE_RANK = re.compile(r"^rank\s*:\s*(\d+)")
_SIGKILLED = re.compile(r"^exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\) received by PID")


def killed(run: Any, replica: Any) -> str | None:
    """What the node's agent says of a container that died of SIGKILL, as templates/job_agent.sh.j2 says
    it: its first process killed (exit -9, or 137 from the sandbox or a shell, as Docker reports it), or a
    worker torchrun reports killed; else None."""
    if run.failure is not None and run.failure[1] != replica.returncode:
        return None  # it failed for another reason (a lost node, a start that failed)
    if replica.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):  # itself, or its first process (Docker's 137)
        return f"{KILLED}: SIGKILL"
    rank = None
    for line in run.log_lines():
        if line.task != replica.spec.task or line.stream != "stderr":
            continue
        text = line.text.strip()
        if m := _TABLE_RANK.match(text):
            rank = m.group(1)
        elif _SIGKILLED.search(text):
            return f"{KILLED}: {'rank ' + rank if rank else 'a worker'} got SIGKILL"
    return None
