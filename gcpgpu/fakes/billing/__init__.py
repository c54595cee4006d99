"""The emulator's Cloud Billing Catalog (cloudbilling.googleapis.com v1): the public services and the Compute Engine
SKUs that price the GPU machine families, from the snapshot in gcpgpu/fakes/data/billing_catalog.yaml.

catalog.py  the snapshot as the API's Service and Sku bodies (checked against the discovery document), and the
            services.list / services.skus.list wire: pageSize, pageToken, currencyCode.
"""

from __future__ import annotations

from typing import Any


def rest_for_emulator(emulator: Any) -> Any:
    from .catalog import BillingCatalogRest

    return BillingCatalogRest()
