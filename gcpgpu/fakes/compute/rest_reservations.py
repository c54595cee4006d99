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
    Rule(f"{P}/zones/<zone>/futureReservations", endpoint="fr_list", methods=["GET"]),
    Rule(f"{P}/zones/<zone>/futureReservations", endpoint="fr_insert", methods=["POST"]),
    Rule(f"{P}/zones/<zone>/futureReservations/<name>", endpoint="fr_get", methods=["GET"]),
    Rule(f"{P}/zones/<zone>/futureReservations/<name>", endpoint="fr_delete", methods=["DELETE"]),
    Rule(f"{P}/zones/<zone>/futureReservations/<name>/cancel", endpoint="fr_cancel", methods=["POST"]),
    Rule(f"{P}/aggregated/futureReservations", endpoint="fr_aggregated", methods=["GET"]),
    Rule(f"{P}/regions/<region>/advice/calendarMode", endpoint="calendar_mode", methods=["POST"]),
    Rule(f"{P}/zones/<zone>/instances/<name>/reportHostAsFaulty", endpoint="report_faulty", methods=["POST"]),
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


    # -- futureReservations -------------------------------------------------------------------
    def on_fr_list(self, req: Request, body: dict, project: str, zone: str) -> dict:
        items = self.b.list_future_reservations(project, zone).get(f"zones/{zone}", [])
        return _listed("futureReservations", project, f"zones/{zone}", items, req)

    def on_fr_insert(self, req: Request, body: dict, project: str, zone: str) -> dict:
        return self.b.insert_future_reservation(project, zone, body, request_id=req.args.get("requestId"))

    def on_fr_get(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        return self.b.get_future_reservation(project, zone, name)

    def on_fr_delete(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        self.b.get_future_reservation(project, zone, name)
        return self.b.delete(project, f"zones/{zone}/futureReservations", name, request_id=req.args.get("requestId"))

    def on_fr_cancel(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        return self.b.cancel_future_reservation(project, zone, name, request_id=req.args.get("requestId"))

    def on_fr_aggregated(self, req: Request, body: dict, project: str) -> dict:
        grouped = self.b.list_future_reservations(project)
        items = {scope: {"futureReservations": frs} for scope, frs in grouped.items()}
        return {"kind": "compute#futureReservationsAggregatedListResponse",
                "id": f"projects/{project}/aggregated/futureReservations", "items": items, "selfLink": req.base_url}

    def on_calendar_mode(self, req: Request, body: dict, project: str, region: str) -> dict:
        return self.b.calendar_mode_advice(project, region, body)

    def on_report_faulty(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        return self.b.report_host_as_faulty(project, zone, name, body, request_id=req.args.get("requestId"))


BODIES: dict[str, tuple[str, str]] = {"fr_insert": ("futureReservations", "insert"),
                                      "calendar_mode": ("advice", "calendarMode"),
                                      "report_faulty": ("instances", "reportHostAsFaulty")}

__all__ = ["ReservationsRest"]
