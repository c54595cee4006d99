"""What happens to a VM that another part of the emulator must act on, in the emulator's shared world.

Compute says when an instance's metadata changed (a cluster job is named there) and when a VM was
lost (preempted, host error); the cluster job agent acts on both. Neither holds the other's hooks:
both hold this one object, built with the emulator (ARCHITECTURE.md, "The emulator's shape as it
grows"), as they share Activity. Listeners run on the announcer's thread, outside its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

# f(project, zone, instance name)
MetadataListener = Callable[[str, str, str], None]
# f(project, zone, instance name, instance id, kind (preempt | host_error | max_run_duration), notice seconds)
LossListener = Callable[[str, str, str, str, str, float], None]


class VmEvents:
    """Announcements about VMs, and who listens to them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metadata: list[MetadataListener] = []
        self._losses: list[LossListener] = []

    def on_metadata_changed(self, listener: MetadataListener) -> None:
        with self._lock:
            self._metadata.append(listener)

    def on_vm_lost(self, listener: LossListener) -> None:
        with self._lock:
            self._losses.append(listener)

    def metadata_changed(self, project: str, zone: str, name: str) -> None:
        """instances.setMetadata changed `name`'s metadata."""
        with self._lock:
            listeners = list(self._metadata)
        for listen in listeners:
            listen(project, zone, name)

    def vm_lost(self, project: str, zone: str, name: str, instance_id: str, kind: str, notice_s: float) -> None:
        """A RUNNING VM was taken away: preempted (`notice_s` before it stops) or lost to a host error."""
        with self._lock:
            listeners = list(self._losses)
        for listen in listeners:
            listen(project, zone, name, instance_id, kind, notice_s)
