"""The one place that builds Google clients, for the real cloud or for the emulator.

Real mode: Application Default Credentials and Google's default endpoints.
Emulator mode (`--emulator HOST:PORT` or GCPGPU_EMULATOR): AnonymousCredentials, REST over plain
http to the emulator, insecure gRPC channels to the port the emulator announces.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from functools import cached_property
from typing import Any

# The operations clients a compute_v1 client's ExtendedOperation polls through.
_OPERATION_SERVICES = {
    "zone_operations": "ZoneOperationsClient",
    "region_operations": "RegionOperationsClient",
    "global_operations": "GlobalOperationsClient",
}


class Clients:
    """Builds (and caches) Google API clients; one instance per command invocation."""

    def __init__(self, emulator: str | None = None, project: str | None = None) -> None:
        self.emulator = emulator
        self.project = project
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def is_emulated(self) -> bool:
        return self.emulator is not None

    @cached_property
    def emulator_info(self) -> dict:
        """What the emulator serves and on which ports (from its info endpoint on the REST port)."""
        if not self.emulator:
            raise RuntimeError("not in emulator mode")
        url = f"http://{self.emulator}/_emulator/info"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback emulator only
                return json.loads(r.read())
        except OSError as e:
            from gcpgpu.errors import CloudError

            raise CloudError(f"cannot reach the emulator at {self.emulator} ({e}); start it with 'gcpgpu emulator start'") from e

    def _credentials(self) -> Any:
        if self.emulator:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
        return None  # the libraries find Application Default Credentials themselves

    def compute(self, name: str) -> Any:
        """A google.cloud.compute_v1 client by class name, e.g. compute("InstancesClient")."""
        with self._lock:
            if name not in self._cache:
                self._cache[name] = self._build_compute(name)
            return self._cache[name]

    def _build_compute(self, name: str) -> Any:
        from gcpgpu.gcp.compute import client_class

        cls = client_class(name)
        if not self.emulator:
            return cls()
        from google.api_core.client_options import ClientOptions

        opts = ClientOptions(api_endpoint=f"http://{self.emulator}")
        client = cls(credentials=self._credentials(), client_options=opts)
        # Polling trap: ExtendedOperation.result() polls through operations clients the transport
        # builds itself, with the default endpoint (https://compute.googleapis.com). Give it ours.
        services = getattr(client._transport, "_extended_operations_services", None)
        if services is not None:
            for key, ops_name in _OPERATION_SERVICES.items():
                services[key] = client_class(ops_name)(credentials=self._credentials(), client_options=opts)
        return client

    def filestore(self) -> Any:
        """A google.cloud.filestore_v1 CloudFilestoreManagerClient (REST: the emulator serves Filestore's JSON)."""
        return self._rest_gapic("filestore", "google.cloud.filestore_v1", "CloudFilestoreManagerClient")

    def lustre(self) -> Any:
        """A google.cloud.lustre_v1 LustreClient (REST)."""
        return self._rest_gapic("lustre", "google.cloud.lustre_v1", "LustreClient")

    def _rest_gapic(self, key: str, module: str, cls_name: str) -> Any:
        with self._lock:
            if key not in self._cache:
                import importlib

                cls = getattr(importlib.import_module(module), cls_name)
                if not self.emulator:
                    self._cache[key] = cls(transport="rest")
                else:
                    from google.api_core.client_options import ClientOptions

                    # The emulator serves each of these APIs under its own prefix (/filestore, /lustre),
                    # as their paths (/v1/projects/...) are alike.
                    self._cache[key] = cls(credentials=self._credentials(), transport="rest",
                                           client_options=ClientOptions(api_endpoint=f"http://{self.emulator}/{key}"))
            return self._cache[key]

    def billing_catalog(self) -> Any:
        """A google.cloud.billing_v1 CloudCatalogClient (REST; the emulator serves the catalog's paths unprefixed)."""
        with self._lock:
            if "billing_catalog" not in self._cache:
                from google.cloud import billing_v1

                if not self.emulator:
                    self._cache["billing_catalog"] = billing_v1.CloudCatalogClient(transport="rest")
                else:
                    from google.api_core.client_options import ClientOptions

                    self._cache["billing_catalog"] = billing_v1.CloudCatalogClient(
                        credentials=self._credentials(), transport="rest",
                        client_options=ClientOptions(api_endpoint=f"http://{self.emulator}"))
            return self._cache["billing_catalog"]

    def servicenetworking(self) -> Any:
        """servicenetworking v1 (private service access) through googleapiclient: Google publishes no
        Cloud Client Library for it. The discovery document is the one the library ships (no fetch)."""
        with self._lock:
            if "servicenetworking" not in self._cache:
                from googleapiclient.discovery import build

                if self.emulator:
                    self._cache["servicenetworking"] = build(
                        "servicenetworking", "v1", credentials=self._credentials(), static_discovery=True,
                        client_options={"api_endpoint": f"http://{self.emulator}/servicenetworking/"})
                else:
                    self._cache["servicenetworking"] = build("servicenetworking", "v1", static_discovery=True)
            return self._cache["servicenetworking"]

    def cloudbuild(self) -> Any:
        """A google.cloud.devtools.cloudbuild_v1 CloudBuildClient (gRPC, the library's default transport)."""
        with self._lock:
            if "cloudbuild" not in self._cache:
                self._cache["cloudbuild"] = self._build_cloudbuild()
            return self._cache["cloudbuild"]

    def _build_cloudbuild(self) -> Any:
        from google.cloud.devtools import cloudbuild_v1

        if not self.emulator:
            return cloudbuild_v1.CloudBuildClient()
        import grpc
        from google.cloud.devtools.cloudbuild_v1.services.cloud_build.transports import (
            CloudBuildGrpcTransport,
        )

        # The emulator serves gRPC in the clear on loopback; a given channel carries no credentials.
        channel = grpc.insecure_channel(self.emulator_info["grpc"])
        return cloudbuild_v1.CloudBuildClient(transport=CloudBuildGrpcTransport(channel=channel))

    def storage(self) -> Any:
        """A google.cloud.storage Client: Application Default Credentials for real; anonymous, over plain
        http to the emulator's REST port, when emulated (its JSON API, uploads and downloads are there)."""
        with self._lock:
            if "storage" not in self._cache:
                from google.cloud import storage

                if self.emulator:
                    self._cache["storage"] = storage.Client(
                        project=self.project or "emulator-project", credentials=self._credentials(),
                        client_options={"api_endpoint": f"http://{self.emulator}"})
                else:
                    self._cache["storage"] = storage.Client(project=self.project)
            return self._cache["storage"]

    def monitoring(self) -> Any:
        """A google.cloud.monitoring_v3 MetricServiceClient (gRPC: the library has no REST transport)."""
        with self._lock:
            if "monitoring" not in self._cache:
                from google.cloud import monitoring_v3
                from google.cloud.monitoring_v3.services.metric_service.transports import (
                    MetricServiceGrpcTransport,
                )

                self._cache["monitoring"] = (
                    monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(channel=self._grpc_channel()))
                    if self.emulator else monitoring_v3.MetricServiceClient())
            return self._cache["monitoring"]

    def dashboards(self) -> Any:
        """A google.cloud.monitoring_dashboard_v1 DashboardsServiceClient (gRPC)."""
        with self._lock:
            if "dashboards" not in self._cache:
                from google.cloud import monitoring_dashboard_v1
                from google.cloud.monitoring_dashboard_v1.services.dashboards_service.transports import (
                    DashboardsServiceGrpcTransport,
                )

                self._cache["dashboards"] = (
                    monitoring_dashboard_v1.DashboardsServiceClient(
                        transport=DashboardsServiceGrpcTransport(channel=self._grpc_channel()))
                    if self.emulator else monitoring_dashboard_v1.DashboardsServiceClient())
            return self._cache["dashboards"]

    def _grpc_channel(self) -> Any:
        # api_endpoint + AnonymousCredentials would build a TLS channel; the emulator speaks gRPC in
        # the clear on loopback, and a client given a channel never asks for credentials.
        import grpc

        return grpc.insecure_channel(self.emulator_info["grpc"])

    def job_service(self, location: str, transport: str = "grpc") -> Any:
        """An aiplatform_v1 JobServiceClient for one region (Vertex AI's endpoints are regional).

        Real: {location}-aiplatform.googleapis.com with Application Default Credentials. Emulator:
        gRPC (the library's default) over an insecure loopback channel, or transport="rest" over
        plain http with AnonymousCredentials.
        """
        key = f"job_service:{location}:{transport}"
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._build_job_service(location, transport)
            return self._cache[key]

    def _build_job_service(self, location: str, transport: str) -> Any:
        from google.api_core.client_options import ClientOptions
        from google.cloud import aiplatform_v1

        if not self.emulator:
            opts = ClientOptions(api_endpoint=f"{location}-aiplatform.googleapis.com")
            return aiplatform_v1.JobServiceClient(client_options=opts, transport=transport)
        if transport == "rest":
            opts = ClientOptions(api_endpoint=f"http://{self.emulator}")
            return aiplatform_v1.JobServiceClient(credentials=self._credentials(), client_options=opts, transport="rest")
        import grpc
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        address = self.emulator_info.get("grpc")
        if not address:
            from gcpgpu.errors import CloudError

            raise CloudError(f"the emulator at {self.emulator} serves no gRPC, so no Vertex AI: it is older than this "
                             "gcpgpu; restart it with 'gcpgpu emulator start'")
        # api_endpoint + AnonymousCredentials would build a TLS channel; a given channel asks for nothing.
        channel = grpc.insecure_channel(address)
        return aiplatform_v1.JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))

    def logging_session(self) -> tuple[Any, str]:
        """(requests session, base URL) for Cloud Logging's REST API, which has entries.list.

        Real: an ADC-authorized session to https://logging.googleapis.com. Emulator: a plain session
        to the emulator, which serves entries.list from the jobs it ran.
        """
        return self._rest_session("logging", "https://www.googleapis.com/auth/logging.read",
                                  "https://logging.googleapis.com")

    def secretmanager_session(self) -> tuple[Any, str]:
        """(requests session, base URL) for Secret Manager's REST API (the emulator's, or Google's with ADC)."""
        return self._rest_session("secretmanager", "https://www.googleapis.com/auth/cloud-platform",
                                  "https://secretmanager.googleapis.com")

    def _rest_session(self, key: str, scope: str, url: str) -> tuple[Any, str]:
        with self._lock:
            if key not in self._cache:
                if self.emulator:
                    import requests

                    self._cache[key] = (requests.Session(), f"http://{self.emulator}")
                else:
                    import google.auth
                    from google.auth.transport.requests import AuthorizedSession

                    credentials, _ = google.auth.default(scopes=[scope])
                    self._cache[key] = (AuthorizedSession(credentials), url)
            return self._cache[key]
