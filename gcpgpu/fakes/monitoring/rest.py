"""Cloud Monitoring over REST/JSON, as gcloud and googleapiclient speak it, under /monitoring/.

v3 (monitoring.googleapis.com/v3): projects.timeSeries list/create, projects.metricDescriptors
list/get/create/delete, projects.monitoredResourceDescriptors list/get. v1: projects.dashboards
create/list/get/patch/delete (what `gcloud monitoring dashboards ...` calls). Point a client at it
with the root URL http://127.0.0.1:PORT/monitoring/ (gcloud: api_endpoint_overrides/monitoring).
The same backend answers the gRPC services, so a point written one way is read the other.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..core import ApiError, parse_rfc3339, proto_timestamp
from .paging import invalid_argument

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

    from ..server import Emulator
    from .backend import MonitoringBackend

_ROUTE = re.compile(r"^/monitoring/(v[13])/projects/([^/]+)/(timeSeries|metricDescriptors|monitoredResourceDescriptors"
                    r"|dashboards)(?:/(.+))?$")


def _time(text: str, field: str) -> float:
    try:
        return parse_rfc3339(text)
    except ValueError:
        raise invalid_argument(f"Invalid value at '{field}' (type.googleapis.com/google.protobuf.Timestamp), "
                               f"Field '{field}', Illegal timestamp format; timestamps must end with 'Z' or have "
                               f"the timezone offset specified: {text!r}") from None


def _duration(text: str, field: str) -> float:
    if not re.fullmatch(r"\d+(\.\d+)?s", text or ""):
        raise invalid_argument(f"Invalid value at '{field}' (type.googleapis.com/google.protobuf.Duration): {text!r}")
    return float(text[:-1])


class MonitoringRest:
    """Routes /monitoring/v3 and /monitoring/v1 requests to the monitoring backend."""

    @classmethod
    def for_emulator(cls, emulator: Emulator) -> MonitoringRest:
        return cls(emulator.monitoring)

    def __init__(self, backend: MonitoringBackend) -> None:
        self.backend = backend

    def handle(self, request: Request) -> tuple[int, Any]:
        m = _ROUTE.match(request.path)
        if m is None:
            raise ApiError(404, "notFound", f"The emulator's Monitoring serves no method at {request.path}.")
        version, project, collection, rest = m.groups()
        method = request.method
        body: dict = {}
        if method in ("POST", "PATCH", "PUT"):
            try:
                body = json.loads(request.get_data() or b"{}")
            except ValueError:
                raise invalid_argument("Invalid JSON payload received.") from None
        args = request.args
        if (version, collection) == ("v1", "dashboards"):
            return self._dashboards(project, method, rest, body, args)
        if version != "v3" or collection == "dashboards":
            raise ApiError(404, "notFound", f"Monitoring {version} has no {collection} collection.")
        page = (_page_size(args), args.get("pageToken", ""))
        if collection == "timeSeries" and rest is None:
            if method == "GET":
                return 200, self._list_series(project, args, page)
            if method == "POST":
                self.backend.create_time_series(project, [_series_in(ts) for ts in body.get("timeSeries") or []])
                return 200, {}
        if collection == "metricDescriptors":
            if rest is None and method == "GET":
                items, token = self.backend.list_metric_descriptors(project, args.get("filter", ""), *page)
                return 200, _listed("metricDescriptors", items, token)
            if rest is None and method == "POST":
                return 200, self.backend.create_metric_descriptor(project, body)
            if rest is not None and method == "GET":
                return 200, self.backend.get_metric_descriptor(project, rest)
            if rest is not None and method == "DELETE":
                self.backend.delete_metric_descriptor(project, rest)
                return 200, {}
        if collection == "monitoredResourceDescriptors" and method == "GET":
            if rest is None:
                items, token = self.backend.list_resource_descriptors(project, args.get("filter", ""), *page)
                return 200, _listed("resourceDescriptors", items, token)
            return 200, self.backend.get_resource_descriptor(project, rest)
        raise ApiError(405, "methodNotAllowed", f"{method} is not a method of {collection}.")

    def _dashboards(self, project: str, method: str, rest: str | None, body: dict, args: Any) -> tuple[int, Any]:
        validate = str(args.get("validateOnly", "")).lower() == "true"
        if rest is None and method == "POST":
            return 200, self.backend.create_dashboard(project, body, validate)
        if rest is None and method == "GET":
            items, token = self.backend.list_dashboards(project, _page_size(args), args.get("pageToken", ""))
            return 200, _listed("dashboards", items, token)
        name = f"projects/{project}/dashboards/{rest}"
        if method == "GET":
            return 200, self.backend.get_dashboard(name)
        if method == "DELETE":
            self.backend.delete_dashboard(name)
            return 200, {}
        if method == "PATCH":
            return 200, self.backend.update_dashboard({**body, "name": name}, validate)
        raise ApiError(405, "methodNotAllowed", f"{method} is not a method of dashboards.")

    def _list_series(self, project: str, args: Any, page: tuple[int, str]) -> dict:
        agg = None
        if any(k.startswith("aggregation.") for k in args):
            agg = {
                "period": _duration(args["aggregation.alignmentPeriod"], "aggregation.alignment_period")
                if args.get("aggregation.alignmentPeriod") else 0.0,
                "aligner": args.get("aggregation.perSeriesAligner") or "ALIGN_NONE",
                "reducer": args.get("aggregation.crossSeriesReducer") or "REDUCE_NONE",
                "group_by": args.getlist("aggregation.groupByFields"),
            }
        end = _time(args["interval.endTime"], "interval.end_time") if args.get("interval.endTime") else 0.0
        start = _time(args["interval.startTime"], "interval.start_time") if args.get("interval.startTime") else 0.0
        flt = args.get("filter", "")
        series, token = self.backend.list_time_series(project, flt, start, end, agg,
                                                      headers_only=args.get("view") == "HEADERS",
                                                      page_size=page[0], page_token=page[1])
        from .filters import equal_literal, parse

        metric_type = equal_literal(parse(flt), "metric.type")[0] if series else ""
        out = [_series_out(metric_type, s) for s in series]
        return _listed("timeSeries", out, token)


def _page_size(args: Any) -> int:
    raw = args.get("pageSize") or "0"
    if not raw.isdigit():
        raise invalid_argument(f"Invalid value at 'page_size' (TYPE_INT32), \"{raw}\"")
    return int(raw)


def _listed(key: str, items: list, token: str) -> dict:
    out: dict[str, Any] = {key: items} if items else {}
    if token:
        out["nextPageToken"] = token
    return out


def _series_out(metric_type: str, s: dict) -> dict:
    points = []
    for start, end, value in s["points"]:
        interval = {"endTime": proto_timestamp(end)}
        if s["kind"] != "GAUGE":
            interval["startTime"] = proto_timestamp(start)
        if s["value_type"] == "INT64":
            v: dict[str, Any] = {"int64Value": str(int(value))}  # proto3 JSON writes int64 as a string
        elif s["value_type"] == "BOOL":
            v = {"boolValue": bool(value)}
        else:
            v = {"doubleValue": float(value)}
        points.append({"interval": interval, "value": v})
    out = {"metric": {"type": metric_type, "labels": dict(s["metric_labels"])},
           "resource": {"type": s["resource_type"], "labels": dict(s["resource_labels"])},
           "metricKind": s["kind"], "valueType": s["value_type"], "points": points}
    if s.get("unit"):
        out["unit"] = s["unit"]
    return out


def _series_in(ts: dict) -> dict:
    points = []
    value_type = ts.get("valueType")
    for p in ts.get("points") or []:
        value = p.get("value") or {}
        which = next(iter(value), None)
        inferred = {"int64Value": "INT64", "doubleValue": "DOUBLE", "boolValue": "BOOL"}.get(which or "")
        if inferred is None:
            raise invalid_argument(f"The emulator stores INT64, DOUBLE and BOOL points, not {which}.")
        if value_type and value_type != inferred:
            raise invalid_argument(f"The point's {which} does not match valueType {value_type}.")
        value_type = inferred
        interval = p.get("interval") or {}
        start = _time(interval["startTime"], "interval.start_time") if interval.get("startTime") else 0.0
        end = _time(interval.get("endTime", ""), "interval.end_time")
        raw = value[which]
        points.append((start, end, float(raw) if which != "boolValue" else float(bool(raw))))
    metric, resource = ts.get("metric") or {}, ts.get("resource") or {}
    if not points:
        raise invalid_argument(f"Each TimeSeries must contain exactly one point; {metric.get('type')} has none.")
    return {"metric_type": metric.get("type", ""), "metric_labels": dict(metric.get("labels") or {}),
            "resource_type": resource.get("type", ""), "resource_labels": dict(resource.get("labels") or {}),
            "kind": ts.get("metricKind") if ts.get("metricKind") not in (None, "METRIC_KIND_UNSPECIFIED") else None,
            "value_type": value_type, "points": points, "unit": ts.get("unit", "")}
