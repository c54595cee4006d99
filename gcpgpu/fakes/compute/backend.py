"""Compute Engine state and behaviour: the part of the emulator that knows what a VM is.

One class over one shared state, put together from a mixin per resource family, as moto builds its
EC2 backend: `state` (projects, lock, clock, helpers), `operations`, `catalog` (zones, regions,
types, images, quotas), `crud` (get/list/delete for every kind), `networks`, `placement` (policies
and reservations), `dense` (DENSE reservations' blocks and sub-blocks), `future` (future reservations, advice), `routers` (Cloud Router + NAT), `instance_spec` (an instance body checked and
stored), `instances`, `templates`, `preemption` (losing a VM), `runtime` (a VM's maxRunDuration),
`topology` (where a compact-placed VM sits), `flex` (flex-start requests that wait for capacity) and
`disks` (standalone disks and attaching them: Hyperdisk ML's read-only sharing).
"""

from __future__ import annotations

from .catalog import CatalogMixin
from .crud import CrudMixin
from .dense import DenseReservationsMixin
from .disks import DisksMixin
from .flex import FlexStartMixin
from .future import FutureReservationsMixin
from .instance_spec import InstanceSpecMixin
from .instances import InstancesMixin
from .maintenance import MaintenanceMixin
from .migs import MigsMixin
from .netops import NetworkOpsMixin
from .networks import NetworksMixin
from .operations import OperationsMixin
from .placement import PlacementMixin
from .preemption import PreemptionMixin
from .projects import ProjectsMixin
from .routers import RoutersMixin
from .runtime import RunDurationMixin
from .state import BASE, GLOBAL, MAX_PAGE, REGIONAL, ZONAL, BackendBase, Project, check_project, last, public
from .templates import TemplatesMixin
from .topology import TopologyMixin

__all__ = ["BASE", "GLOBAL", "MAX_PAGE", "REGIONAL", "ZONAL", "ComputeBackend", "Project", "check_project", "last",
           "public"]


class ComputeBackend(OperationsMixin, ProjectsMixin, CatalogMixin, CrudMixin, NetworksMixin, NetworkOpsMixin,
                     RoutersMixin, MigsMixin, PlacementMixin, DenseReservationsMixin, FutureReservationsMixin,
                     MaintenanceMixin, InstanceSpecMixin, InstancesMixin, TemplatesMixin, PreemptionMixin,
                     RunDurationMixin, TopologyMixin, FlexStartMixin, DisksMixin, BackendBase):
    """The Compute Engine v1 API's behaviour over in-memory state, one lock for all of it."""
