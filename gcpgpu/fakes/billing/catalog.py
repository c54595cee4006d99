"""services.list and services.skus.list of the Cloud Billing Catalog API, served from a snapshot.

    GET /v1/services                    services.list (pageSize, pageToken)
    GET /v1/services/SERVICE_ID/skus    services.skus.list (pageSize, pageToken, currencyCode, startTime, endTime)

What Google answers, as the cloudbilling.v1 discovery document describes it: pageSize defaults to 5000; a page
with more after it carries nextPageToken; currencyCode converts every unitPrice and sets currencyConversionRate
("USD * currency_conversion_rate = JPY"); startTime/endTime are accepted and answered with the snapshot's prices
(the snapshot has one pricing version). A query parameter the method does not have is refused as the front end
refuses one ("Cannot bind query parameter", wording as remembered, unverified); so are a pageToken this server
did not give, an unknown currency and an unknown service (404; wording unverified).
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from importlib import resources
from typing import Any

import yaml

from ..core import ApiError
from ..schema import check, discovery

API = "cloudbilling.v1"
DEFAULT_PAGE = 5000
_UNITS = {  # usageUnit: (description, baseUnit, baseUnitDescription, conversion factor to the base unit)
    "h": ("hour", "s", "second", 3600),
    "GiBy.h": ("gibibyte hour", "By.s", "byte second", 1024**3 * 3600),
    "GiBy.mo": ("gibibyte month", "By.s", "byte second", 1024**3 * 3600 * 730),
}
_LIST_PARAMS = {"pageSize", "pageToken"}
_COMMON = {"$alt", "alt", "fields", "prettyPrint", "key", "access_token", "quotaUser", "$fields", "callback"}


@functools.cache
def snapshot() -> dict[str, Any]:
    text = (resources.files("gcpgpu.fakes") / "data" / "billing_catalog.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _service(entry: dict) -> dict:
    return {"name": f"services/{entry['serviceId']}", "serviceId": entry["serviceId"],
            "displayName": entry["displayName"], "businessEntityName": entry["businessEntityName"]}


@functools.cache
def services() -> tuple[dict, ...]:
    data = snapshot()
    out = tuple(_service(s) for s in [data["service"], *data.get("other_services", [])])
    for body in out:
        check(API, "Service", copy.deepcopy(body), "service")
    return out


def _money(amount: float, currency: str) -> dict:
    nanos_total = round(amount * 1e9)
    return {"currencyCode": currency, "units": str(nanos_total // 10**9), "nanos": int(nanos_total % 10**9)}


def sku_body(entry: dict, service_id: str, display: str, as_of: str) -> dict:
    """One snapshot SKU as the API's Sku, in USD."""
    unit_text, base, base_text, factor = _UNITS[entry["unit"]]
    regions = list(entry["regions"])
    return {
        "name": f"services/{service_id}/skus/{entry['id']}",
        "skuId": entry["id"],
        "description": entry["description"],
        "category": {"serviceDisplayName": display, "resourceFamily": entry["family"],
                     "resourceGroup": entry["group"], "usageType": entry["usage"]},
        "serviceRegions": regions,
        "pricingInfo": [{
            "summary": "",
            "pricingExpression": {
                "usageUnit": entry["unit"], "usageUnitDescription": unit_text, "baseUnit": base,
                "baseUnitDescription": base_text, "baseUnitConversionFactor": factor, "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(float(entry["price"]), "USD")}],
            },
            "currencyConversionRate": 1,
            "effectiveTime": f"{as_of}T00:00:00Z",
        }],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL", "regions": regions},
    }


@functools.cache
def skus() -> tuple[dict, ...]:
    """Every snapshot SKU as the API gives it, each checked against the discovery document's Sku."""
    data = snapshot()
    service = data["service"]
    out = tuple(sku_body(e, service["serviceId"], service["displayName"], data["as_of"]) for e in data["skus"])
    for body in out:
        check(API, "Sku", copy.deepcopy(body), "sku")
    return out


def _in_currency(body: dict, currency: str, rate: float) -> dict:
    if currency == "USD":
        return body
    body = copy.deepcopy(body)
    for info in body["pricingInfo"]:
        info["currencyConversionRate"] = rate
        for tier in info["pricingExpression"]["tieredRates"]:
            price = tier["unitPrice"]
            usd = int(price["units"]) + price["nanos"] / 1e9
            tier["unitPrice"] = _money(usd * rate, currency)
    return body


def _token(offset: int, what: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([what, offset]).encode()).decode()


def _offset(token: str, what: str) -> int:
    if not token:
        return 0
    try:
        kind, offset = json.loads(base64.urlsafe_b64decode(token.encode()))
        if kind == what and isinstance(offset, int) and offset >= 0:
            return offset
    except (ValueError, TypeError):
        pass
    raise ApiError(400, "badRequest", "Invalid page token.")  # wording unverified


def _page_size(args: Any) -> int:
    raw = args.get("pageSize", "") or "0"
    try:
        size = int(raw)
    except ValueError:
        raise ApiError(400, "badRequest", f"Invalid value at 'page_size' (TYPE_INT32), \"{raw}\"") from None
    return size if size > 0 else DEFAULT_PAGE


def _page(items: list[dict], args: Any, key: str, what: str) -> dict:
    start, size = _offset(args.get("pageToken", ""), what), _page_size(args)
    out: dict[str, Any] = {key: items[start:start + size]}
    if start + size < len(items):
        out["nextPageToken"] = _token(start + size, what)
    return out


def _check_query(args: Any, method: str) -> None:
    """Refuse a query parameter the method does not have, as Google's front end does."""
    allowed = set(_method(method)["parameters"]) - {"parent"}
    for name in args:
        if name not in allowed and name not in _COMMON:
            raise ApiError(400, "badRequest", f'Invalid JSON payload received. Unknown name "{name}": '
                                              "Cannot bind query parameter. Field "
                                              f"'{name}' could not be found in request message.")


@functools.cache
def _method(method: str) -> dict:
    resource = discovery(API)["resources"]["services"]
    return resource["methods"]["list"] if method == "services.list" else resource["resources"]["skus"]["methods"]["list"]


class BillingCatalogRest:
    """Answers /v1/services and /v1/services/ID/skus (GET only, as Google's)."""

    def handle(self, request: Any) -> tuple[int, dict]:
        parts = request.path.strip("/").split("/")  # v1, services[, ID, skus]
        if request.method != "GET" or len(parts) not in (2, 4) or (len(parts) == 4 and parts[3] != "skus"):
            raise ApiError(404, "notFound", f"The Cloud Billing Catalog has no method at {request.method} {request.path}.")
        args = request.args
        if len(parts) == 2:
            _check_query(args, "services.list")
            return 200, _page(list(services()), args, "services", "services")
        _check_query(args, "services.skus.list")
        service_id = parts[2]
        if service_id not in {s["serviceId"] for s in services()}:
            raise ApiError(404, "notFound", f"Service services/{service_id} not found.")  # wording unverified
        currency = (args.get("currencyCode") or "USD").upper()
        rates = snapshot()["currencies"]
        if currency not in rates:
            raise ApiError(400, "badRequest", f"Invalid currency code: {currency}.")  # wording unverified
        items = list(skus()) if service_id == snapshot()["service"]["serviceId"] else []
        page = _page(items, args, "skus", f"skus/{service_id}/{currency}")
        page["skus"] = [_in_currency(s, currency, float(rates[currency])) for s in page["skus"]]
        return 200, page
