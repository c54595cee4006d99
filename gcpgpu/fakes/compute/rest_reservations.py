"""Compute v1 REST for reservation capacity: reservationBlocks, reservationSubBlocks, futureReservations,
advice.calendarMode and instances.reportHostAsFaulty (paths as in the discovery document).

Wire format only; the backend decides. Served ahead of rest.py's generic routes (fakes/server.py).
"""

from __future__ import annotations

from typing import Any

from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request

from .rest import _list_response
from .schema import check_body

P = "/compute/v1/projects/<project>"
RB = f"{P}/zones/<zone>/reservations/<reservation>/reservationBlocks"

URLS = Map([
    Rule(RB, endpoint="blocks", methods=["GET"]),
    Rule(f"{RB}/<block>", endpoint="block", methods=["GET"]),
    Rule(f"{RB}/<block>/reservationSubBlocks", endpoint="sub_blocks", methods=["GET"]),
    Rule(f"{RB}/<block>/reservationSubBlocks/<sub>", endpoint="sub_block", methods=["GET"]),
], strict_slashes=False, merge_slashes=False)

# Resource kind -> the `kind` of its list responses (discovery document's list schemas).
LIST_KINDS = {"reservationBlocks": "compute#reservationBlock",
              "reservationSubBlocks": "compute#reservationSubBlock",
              "futureReservations": "compute#FutureReservationsListResponse"}


def _listed(kind: str, project: str, scope: str, items: list, req: Request) -> dict:
    out = _list_response(kind, project, scope, items, req)
    out["kind"] = LIST_KINDS[kind]
    return out


class ReservationsRest:
    @classmethod
    def for_emulator(cls, emulator: Any) -> ReservationsRest:
        return cls(emulator.compute)

    def __init__(self, backend: Any) -> None:
        self.b = backend

    def handle(self, request: Request) -> tuple[int, dict | None]:
        import json

        from ..core import ApiError

        try:
            endpoint, args = URLS.bind_to_environ(request.environ).match()
        except Exception as e:
            raise ApiError(404, "notFound", f"The requested URL {request.path} was not found on this server.") from e
        body: dict = {}
        if request.method in ("POST", "PUT", "PATCH") and request.get_data():
            try:
                body = json.loads(request.get_data())
            except ValueError as e:
                raise ApiError(400, "parseError", "Invalid JSON payload received.") from e
            check_body(*BODIES[endpoint], body)
        return 200, getattr(self, f"on_{endpoint}")(request, body, **args)

    def on_blocks(self, req: Request, body: dict, project: str, zone: str, reservation: str) -> dict:
        items = self.b.list_reservation_blocks(project, zone, reservation)
        return _listed("reservationBlocks", project, f"zones/{zone}/reservations/{reservation}", items, req)

    def on_block(self, req: Request, body: dict, project: str, zone: str, reservation: str, block: str) -> dict:
        # The discovery document wraps get's answer: ReservationBlocksGetResponse {resource}.
        return {"resource": self.b.get_reservation_block(project, zone, reservation, block)}

    def on_sub_blocks(self, req: Request, body: dict, project: str, zone: str, reservation: str, block: str) -> dict:
        items = self.b.list_reservation_sub_blocks(project, zone, reservation, block)
        return _listed("reservationSubBlocks", project, f"zones/{zone}/reservations/{reservation}", items, req)

    def on_sub_block(self, req: Request, body: dict, project: str, zone: str, reservation: str, block: str,
                     sub: str) -> dict:
        return {"resource": self.b.get_reservation_sub_block(project, zone, reservation, block, sub)}


BODIES: dict[str, tuple[str, str]] = {}

__all__ = ["ReservationsRest"]
