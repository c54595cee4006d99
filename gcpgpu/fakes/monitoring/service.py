"""Cloud Monitoring over gRPC, as google-cloud-monitoring and -monitoring-dashboards speak it.

google.monitoring.v3.MetricService: ListTimeSeries, CreateTimeSeries, the metric descriptor
methods and ListMonitoredResourceDescriptors. google.monitoring.dashboard.v1.DashboardsService:
Create/Get/List/Update/DeleteDashboard. Requests are read and answers built with the raw protobuf
classes behind the libraries' proto-plus types; an aligned DOUBLE answer (what a cluster's tail asks
for, up to 8,192 series) is written as bytes from its columns (wire.py). The backend speaks plain Python. One emulator-only method, /gcpgpu.emulator.v1.Monitoring/Configure, takes
JSON knobs (stragglers, which agents report, Vertex jobs) from another process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.api import metric_pb2, monitored_resource_pb2
from google.cloud import monitoring_dashboard_v1 as dash
from google.cloud import monitoring_v3 as m
from google.protobuf import empty_pb2, json_format

from ..core import ApiError
from ..grpc_service import EmulatedService, json_request, json_response
from . import wire
from .backend import MonitoringBackend
from .columns import Columns

if TYPE_CHECKING:
    from ..server import Emulator

METRICS = "google.monitoring.v3.MetricService"
DASHBOARDS = "google.monitoring.dashboard.v1.DashboardsService"
CONFIGURE = "/gcpgpu.emulator.v1.Monitoring/Configure"

_PB = {name: getattr(m, name).pb() for name in (
    "ListTimeSeriesRequest", "ListTimeSeriesResponse", "CreateTimeSeriesRequest", "TimeSeries",
    "ListMetricDescriptorsRequest", "ListMetricDescriptorsResponse", "GetMetricDescriptorRequest",
    "CreateMetricDescriptorRequest", "DeleteMetricDescriptorRequest", "ListMonitoredResourceDescriptorsRequest",
    "ListMonitoredResourceDescriptorsResponse", "GetMonitoredResourceDescriptorRequest",
)}  # fmt: skip
_DPB = {name: getattr(dash, name).pb() for name in (
    "Dashboard", "CreateDashboardRequest", "GetDashboardRequest", "ListDashboardsRequest", "ListDashboardsResponse",
    "DeleteDashboardRequest", "UpdateDashboardRequest",
)}  # fmt: skip
_KINDS = {0: None, 1: "GAUGE", 2: "DELTA", 3: "CUMULATIVE"}


def _seconds(ts: Any) -> float:
    return ts.seconds + ts.nanos / 1e9


def _project(name: str) -> str:
    parts = name.split("/")
    if len(parts) < 2 or parts[0] != "projects" or not parts[1]:
        raise ApiError(400, "badRequest", f"Field name had an invalid value of {name!r}: expected projects/PROJECT.")
    return parts[1]


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


class MonitoringService(EmulatedService):
    """Routes MetricService, DashboardsService and the Configure helper to the monitoring backend."""

    def __init__(self, emulator: Emulator, backend: MonitoringBackend, services: tuple[str, ...] = (METRICS, DASHBOARDS)) -> None:
        super().__init__(emulator)
        self.backend = backend
        # (service, its request messages, its API in the request log, (method, handler, HTTP verb) rows)
        routes: tuple[tuple[str, dict, str, tuple[tuple[str, Callable[[Any], Any], str], ...]], ...] = (
            (METRICS, _PB, "monitoring", (
                ("ListTimeSeries", self._list_ts, "GET"),
                ("CreateTimeSeries", self._create_ts, "POST"),
                ("ListMetricDescriptors", self._list_desc, "GET"),
                ("GetMetricDescriptor", self._get_desc, "GET"),
                ("CreateMetricDescriptor", self._create_desc, "POST"),
                ("DeleteMetricDescriptor", self._delete_desc, "DELETE"),
                ("ListMonitoredResourceDescriptors", self._list_resources, "GET"),
                ("GetMonitoredResourceDescriptor", self._get_resource, "GET"),
            )),
            (DASHBOARDS, _DPB, "dashboards", (
                ("CreateDashboard", self._create_dash, "POST"),
                ("GetDashboard", self._get_dash, "GET"),
                ("ListDashboards", self._list_dash, "GET"),
                ("DeleteDashboard", self._delete_dash, "DELETE"),
                ("UpdateDashboard", self._update_dash, "PATCH"),
            )),
        )  # fmt: skip
        for service, messages, api, rows in routes:
            if service in services:
                for method, handler, http in rows:
                    deserialize = messages[f"{method}Request"].FromString
                    self.serve(f"/{service}/{method}", handler, deserialize, _serialize, http, api=api)
        if METRICS in services:  # no faults, no request log: a knob, not an API call
            self._methods[CONFIGURE] = grpc.unary_unary_rpc_method_handler(
                lambda request, context: self.backend.configure(request), request_deserializer=json_request,
                response_serializer=json_response)

    # ------------------------------------------------------------------ time series
    def _list_ts(self, req: Any) -> Any:
        agg = None
        if req.HasField("aggregation"):
            a = req.aggregation
            agg = {
                "period": _seconds(a.alignment_period),
                "aligner": m.Aggregation.Aligner(a.per_series_aligner).name,
                "reducer": m.Aggregation.Reducer(a.cross_series_reducer).name,
                "group_by": list(a.group_by_fields),
            }
        series, token = self.backend.list_time_series(
            _project(req.name), req.filter, _seconds(req.interval.start_time), _seconds(req.interval.end_time),
            agg, headers_only=req.view == 1, page_size=req.page_size, page_token=req.page_token)
        metric_type = _metric_type(req.filter) if series else ""
        if isinstance(series, Columns):
            encoded = wire.encode(series, metric_type, token)
            if encoded is not None:
                return encoded  # the response's bytes, as _serialize passes them on
        return series_message(series, metric_type, token)

    def _create_ts(self, req: Any) -> Any:
        series = []
        for ts in req.time_series:
            vtype = ts.value_type
            points = []
            for p in ts.points:
                which = p.value.WhichOneof("value")
                if which not in ("int64_value", "double_value", "bool_value"):
                    raise ApiError(400, "badRequest", f"The emulator stores INT64, DOUBLE and BOOL points, not {which}.")
                value = float(getattr(p.value, which))
                inferred = {"int64_value": "INT64", "double_value": "DOUBLE", "bool_value": "BOOL"}[which]
                if vtype and {v: k for k, v in wire.VTYPE_NUM.items()}.get(vtype) != inferred:
                    raise ApiError(400, "badRequest", f"The point's {which} does not match value_type of {ts.metric.type}.")
                vtype_name = inferred
                start = _seconds(p.interval.start_time) if p.interval.HasField("start_time") else 0.0
                points.append((start, _seconds(p.interval.end_time), value))
            if not points:
                raise ApiError(400, "badRequest", f"Each TimeSeries must contain exactly one point; {ts.metric.type} has none.")
            series.append({
                "metric_type": ts.metric.type, "metric_labels": dict(ts.metric.labels),
                "resource_type": ts.resource.type, "resource_labels": dict(ts.resource.labels),
                "kind": _KINDS.get(ts.metric_kind), "value_type": vtype_name, "points": points, "unit": ts.unit,
            })
        self.backend.create_time_series(_project(req.name), series)
        return empty_pb2.Empty()

    # ------------------------------------------------------------------ descriptors
    def _descriptor_pb(self, d: dict) -> Any:
        return json_format.ParseDict(d, metric_pb2.MetricDescriptor(), ignore_unknown_fields=True)

    def _list_desc(self, req: Any) -> Any:
        items, token = self.backend.list_metric_descriptors(_project(req.name), req.filter, req.page_size, req.page_token)
        resp = _PB["ListMetricDescriptorsResponse"]()
        resp.metric_descriptors.extend(self._descriptor_pb(d) for d in items)
        resp.next_page_token = token
        return resp

    def _get_desc(self, req: Any) -> Any:
        project = _project(req.name)
        return self._descriptor_pb(self.backend.get_metric_descriptor(project, _descriptor_type(req.name)))

    def _create_desc(self, req: Any) -> Any:
        desc = json_format.MessageToDict(req.metric_descriptor)
        return self._descriptor_pb(self.backend.create_metric_descriptor(_project(req.name), desc))

    def _delete_desc(self, req: Any) -> Any:
        self.backend.delete_metric_descriptor(_project(req.name), _descriptor_type(req.name))
        return empty_pb2.Empty()

    def _list_resources(self, req: Any) -> Any:
        items, token = self.backend.list_resource_descriptors(_project(req.name), req.filter, req.page_size,
                                                              req.page_token)
        resp = _PB["ListMonitoredResourceDescriptorsResponse"]()
        resp.resource_descriptors.extend(_resource_pb(d) for d in items)
        resp.next_page_token = token
        return resp

    def _get_resource(self, req: Any) -> Any:
        marker = "/monitoredResourceDescriptors/"
        if marker not in req.name:
            raise ApiError(400, "badRequest", f"Field name had an invalid value of {req.name!r}: "
                           "expected projects/PROJECT/monitoredResourceDescriptors/TYPE.")
        return _resource_pb(self.backend.get_resource_descriptor(_project(req.name), req.name.split(marker, 1)[1]))

    # ------------------------------------------------------------------ dashboards
    @staticmethod
    def _dash_pb(d: dict) -> Any:
        return json_format.ParseDict(d, _DPB["Dashboard"](), ignore_unknown_fields=True)

    def _create_dash(self, req: Any) -> Any:
        d = json_format.MessageToDict(req.dashboard)
        return self._dash_pb(self.backend.create_dashboard(_project(req.parent), d, req.validate_only))

    def _get_dash(self, req: Any) -> Any:
        return self._dash_pb(self.backend.get_dashboard(req.name))

    def _list_dash(self, req: Any) -> Any:
        items, token = self.backend.list_dashboards(_project(req.parent), req.page_size, req.page_token)
        resp = _DPB["ListDashboardsResponse"]()
        resp.dashboards.extend(self._dash_pb(d) for d in items)
        resp.next_page_token = token
        return resp

    def _delete_dash(self, req: Any) -> Any:
        self.backend.delete_dashboard(req.name)
        return empty_pb2.Empty()

    def _update_dash(self, req: Any) -> Any:
        d = json_format.MessageToDict(req.dashboard)
        return self._dash_pb(self.backend.update_dashboard(d, req.validate_only))


def series_message(series: Any, metric_type: str, token: str) -> Any:
    """A ListTimeSeriesResponse built field by field from series dicts (what wire.encode's bytes parse to)."""
    resp = _PB["ListTimeSeriesResponse"]()
    # Series share their buckets: each (start, end) interval is made once and copied into each point
    # (8,192 points at 1,024 nodes; setting their timestamps one by one was a third of the call).
    intervals: dict[tuple[float, float, bool], Any] = {}
    for s in series:
        ts = resp.time_series.add()
        wire.fill_header(ts, metric_type, s)
        is_int = s["value_type"] == "INT64"
        gauge = s["kind"] == "GAUGE"
        for start, end, value in s["points"]:
            p = ts.points.add()
            interval = intervals.get((start, end, gauge))
            if interval is None:
                interval = intervals[(start, end, gauge)] = type(p.interval)()
                wire.set_time(interval.end_time, end)
                if not gauge:
                    wire.set_time(interval.start_time, start)
            p.interval.CopyFrom(interval)
            if is_int:
                p.value.int64_value = int(value)
            elif s["value_type"] == "BOOL":
                p.value.bool_value = bool(value)
            else:
                p.value.double_value = float(value)
    resp.next_page_token = token
    return resp


def _resource_pb(d: dict) -> Any:
    return json_format.ParseDict(d, monitored_resource_pb2.MonitoredResourceDescriptor(), ignore_unknown_fields=True)


def _descriptor_type(name: str) -> str:
    marker = "/metricDescriptors/"
    if marker not in name:
        raise ApiError(400, "badRequest", f"Field name had an invalid value of {name!r}: "
                       "expected projects/PROJECT/metricDescriptors/TYPE.")
    return name.split(marker, 1)[1]


def _metric_type(flt: str) -> str:
    from .filters import equal_literal, parse

    return equal_literal(parse(flt), "metric.type")[0]
