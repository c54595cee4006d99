"""The emulator's Cloud Monitoring: MetricService and DashboardsService over gRPC, with made-up VM metrics.

    gcp.monitoring.straggler("demo-2", factor=0.5)      # one node at half its peers' pace
    gcp.monitoring.agents(dcgm=False)                   # no DCGM profiling metrics anywhere
    gcp.monitoring.add_job("123", replicas=4)           # a Vertex job's cloudml_job metrics

From another process: `configure(address, {"stragglers": [{"instance": "demo-2", "factor": 0.5}]})`
or `python -m gcpgpu.fakes.monitoring --emulator HOST:PORT straggler demo-2 0.5`.
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
