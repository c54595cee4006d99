"""Consuming a reservation with `cluster up --reservation`: read it before anything is created, check
it fits the request, and bind the nodes to it the way its kind demands.

API values (Compute v1 discovery document that googleapiclient ships, unless said otherwise):
- `Reservation.deploymentType` DENSE | DEPLOYMENT_TYPE_UNSPECIFIED; a VM consuming a DENSE
  reservation must set `Scheduling.provisioningModel` RESERVATION_BOUND (enum FLEX_START |
  RESERVATION_BOUND | SPOT | STANDARD); Compute refuses STANDARD there with 400 "Instances
  consuming DENSE reservations must use provisioningModel RESERVATION_BOUND" (SkyPilot issue 9771,
  fixed by PR 9779; Cluster Toolkit's a4high-vm.yaml defaults to RESERVATION_BOUND).
- Reservation-bound VMs end with the reservation; `Scheduling.instanceTerminationAction`
  (DELETE | STOP) says how. gcpgpu's default, DELETE, is its own choice (Google's "About
  reservation-bound VMs" guide: that a termination action is required is unverified here).
- A calendar-mode reservation (one a `FutureReservation` with `reservationMode: CALENDAR` created)
  ends at a set time: it carries `deleteAtTime` (Reservation schema). Treating every reservation
  with `deleteAtTime` as calendar-mode is gcpgpu's inference, unverified.
- Blocks: `reservationAffinity.values` = `R/reservationBlocks/B[/reservationSubBlocks/S]`
  (Google's guide on consuming reservation blocks; not spelled out in the discovery document:
  unverified beyond the guide); their free room from `ReservationBlock.count` / `inUseCount` and
  `ReservationSubBlock.count` / `inUseCount` (discovery document).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem

from .names import RFC1035

_PATH = re.compile(r"^([^/]+)(?:/reservationBlocks/([^/]+)(?:/reservationSubBlocks/([^/]+))?)?$")


@dataclass(frozen=True)
class Target:
    reservation: str
    block: str | None = None
    sub_block: str | None = None

    @property
    def where(self) -> str:
        out = f"reservation {self.reservation}"
        if self.block:
            out += f" block {self.block}"
        if self.sub_block:
            out += f" sub-block {self.sub_block}"
        return out


def parse_target(value: str) -> Target:
    """`R`, `R/reservationBlocks/B` or `R/reservationBlocks/B/reservationSubBlocks/S`, as the API spells
    a block; anything else is refused in one line (exit 2)."""
    text = str(value).strip()
    m = _PATH.match(text)
    if not m or not all(RFC1035.match(x) for x in m.groups() if x is not None):
        raise UsageProblem(f"--reservation {text!r} must be NAME, NAME/reservationBlocks/BLOCK or "
                           "NAME/reservationBlocks/BLOCK/reservationSubBlocks/SUB_BLOCK (each an RFC 1035 name)")
    return Target(*m.groups())


def binds(res: object) -> bool:
    """Whether VMs consuming reservation `res` (a compute_v1 Reservation) must be RESERVATION_BOUND."""
    return getattr(res, "deployment_type", "") == "DENSE" or bool(getattr(res, "delete_at_time", ""))


def check_fit(s: Any, plan: Any, res: Any, zone: str, needed: int) -> None:
    """Machine type and free room, before anything is created: another machine type or too few free
    VMs is the user's to fix (exit 2, one line). `s` a Session, `plan` a Plan (typed loosely: spec
    imports this module, plan imports spec)."""
    target = parse_target(plan.spec.reservation)
    props = res.specific_reservation.instance_properties
    held = str(props.machine_type).rsplit("/", 1)[-1]
    if held and held != plan.machine.name:
        raise UsageProblem(f"--reservation {target.reservation} holds {held}, not --machine-type "
                           f"{plan.machine.name}: pass --machine-type {held} or another reservation")
    total, used = int(res.specific_reservation.count), int(res.specific_reservation.in_use_count)
    if target.block:
        total, used = _block_room(s, zone, target)
    if total - used < needed:
        raise UsageProblem(f"--reservation {plan.spec.reservation}: {total - used} of {total} VMs free in "
                           f"{target.where}, {needed} needed; pass --nodes {max(total - used, 0)} or free some")


def _block_room(s: Any, zone: str, target: Target) -> tuple[int, int]:
    from gcpgpu.gcp.errors import is_not_found

    try:
        if target.sub_block:
            got = s.client("ReservationSubBlocksClient").get(
                project=s.project, zone=zone, reservation_sub_block=target.sub_block,
                parent_name=f"reservations/{target.reservation}/reservationBlocks/{target.block}").resource
        else:
            got = s.client("ReservationBlocksClient").get(
                project=s.project, zone=zone, reservation=target.reservation,
                reservation_block=target.block).resource
    except Exception as e:
        if is_not_found(e):
            raise UsageProblem(f"--reservation: no {target.where} in {zone}; "
                               f"'gcpgpu reservation describe {target.reservation}' lists its blocks") from e
        raise CloudError(f"--reservation: reading {target.where}: {e}") from e
    return int(got.count), int(got.in_use_count)
