"""The emulator's Cloud Monitoring: MetricService and DashboardsService over gRPC, with made-up VM metrics.

    gcp.monitoring.straggler("demo-2", factor=0.5)      # one node at half its peers' pace
    gcp.monitoring.agents(dcgm=False)                   # no DCGM profiling metrics anywhere
    gcp.monitoring.add_job("123", replicas=4)           # a Vertex job's cloudml_job metrics

From another process: `configure(address, {"stragglers": [{"instance": "demo-2", "factor": 0.5}]})`
or `python -m gcpgpu.fakes.monitoring --emulator HOST:PORT straggler demo-2 0.5`.

backend.py    MonitoringBackend (`emulator.monitoring`): time series written and made up, metric
              descriptors, dashboards, and the knobs above.
catalog.py    what Monitoring knows before anyone writes: built-in metric descriptors, monitored resources.
observed.py   what Monitoring observes of the rest of the emulator: running VMs and what runs on them,
              Vertex AI jobs.
synthetic.py  plausible metrics for emulated VMs and Vertex jobs, made up deterministically from a seed.
reading.py    ListTimeSeries over the backend's state: the series a filter matches, aligned and reduced
              as `aggregation` asks, one page at a time.
filters.py    Monitoring's filter language, as ListTimeSeries and dashboards take it.
aggregate.py  alignment and cross-series reduction, as the service does them server-side.
columns.py    an aggregated answer kept as columns, not a dict and a list of points per series.
paging.py     paging and the 400 error the backend's parts share.
dashboards.py dashboards (google.monitoring.dashboard.v1): create, get, list, update, delete.
service.py    the gRPC wire, as google-cloud-monitoring and -monitoring-dashboards speak it.
wire.py       ListTimeSeriesResponse bytes straight from a columns answer, each point's double spliced in.
rest.py       the REST/JSON wire under /monitoring/, as gcloud and googleapiclient speak it.
__main__.py   the knobs of a running emulator, from a shell (the demo makes a straggler this way).
testing.py    test and benchmark helpers: a labelled GPU cluster that has been running a while, in one call.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .backend import MonitoringBackend

if TYPE_CHECKING:
    from ..server import Emulator

__all__ = ["MonitoringBackend", "configure", "dashboards_service", "grpc_service"]


def grpc_service(emulator: Emulator) -> Any:
    """google.monitoring.v3.MetricService (imported here: grpc and the Monitoring types are heavy)."""
    from .service import METRICS, MonitoringService

    return MonitoringService(emulator, emulator.monitoring, services=(METRICS,))


def dashboards_service(emulator: Emulator) -> Any:
    """google.monitoring.dashboard.v1.DashboardsService."""
    from .service import DASHBOARDS, MonitoringService

    return MonitoringService(emulator, emulator.monitoring, services=(DASHBOARDS,))


def configure(grpc_address: str, settings: dict) -> dict:
    """Turn the monitoring knobs of an emulator running in another process (its gRPC HOST:PORT)."""
    import grpc

    from .service import CONFIGURE

    with grpc.insecure_channel(grpc_address) as channel:
        call = channel.unary_unary(CONFIGURE, request_serializer=lambda v: json.dumps(v).encode(),
                                   response_deserializer=json.loads)
        return call(settings, timeout=10)
