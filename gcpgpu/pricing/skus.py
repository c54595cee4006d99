"""Billing Catalog SKUs reduced to what pricing needs, and a node's hourly price composed from them.

A SKU's description names its resource, its provisioning and its location: "Nvidia H100 80GB GPU attached to Spot
Preemptible VMs running in Americas". gcpgpu keeps (base, provisioning, regions, unit, price): base is the
description less its provisioning words and location ("Nvidia H100 80GB GPU"), which the catalog's `billing`
table names per family. Google tags DWS and reserved SKUs usageType OnDemand, so the description decides;
committed-use and calendar-mode SKUs are not priced here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PROVISIONING = ("STANDARD", "SPOT", "FLEX_START", "RESERVATION_BOUND")
HOURS_PER_MONTH = 730  # Google's month in its per-month SKUs (Local SSD per GiB-month)
LOCAL_SSD_GIB = 375
_LOCATION = re.compile(r"\s+(?:running\s+)?in\s+[A-Z][\w .()-]*$")
_PER_HOUR = {"h": 1.0, "GiBy.h": 1.0, "GiBy.mo": 1 / HOURS_PER_MONTH}


@dataclass(frozen=True)
class Sku:
    base: str
    provisioning: str
    regions: tuple[str, ...]
    unit: str
    price: float  # in the unit's currency per usage unit

    def to_json(self) -> dict:
        return {"base": self.base, "provisioning": self.provisioning, "regions": list(self.regions),
                "unit": self.unit, "price": self.price}

    @classmethod
    def from_json(cls, data: dict) -> Sku:
        return cls(str(data["base"]), str(data["provisioning"]), tuple(data["regions"]), str(data["unit"]),
                   float(data["price"]))


def classify(description: str, usage_type: str) -> tuple[str, str] | None:
    """(base, provisioning) of a SKU, or None for one gcpgpu does not price (commitments, calendar mode)."""
    if usage_type.startswith("Commit") or "Calendar Mode" in description or "Commitment" in description:
        return None
    if usage_type == "Preemptible" or "Spot Preemptible" in description:
        provisioning = "SPOT"
    elif "DWS Defined Duration" in description:
        provisioning = "FLEX_START"
    elif description.startswith("Reserved "):
        provisioning = "RESERVATION_BOUND"
    elif usage_type == "OnDemand":
        provisioning = "STANDARD"
    else:
        return None
    base = description.removeprefix("Spot Preemptible ").removeprefix("Reserved ")
    for words in (" attached to Spot Preemptible VMs", " attached to DWS Defined Duration VMs"):
        base = base.replace(words, "")
    return _LOCATION.sub("", base).strip(), provisioning


def from_api(sku: Any, wanted: set[str]) -> Sku | None:
    """A google.cloud.billing_v1 Sku as gcpgpu keeps it, if its base is one `wanted` names (its latest price,
    first tier)."""
    found = classify(sku.description, sku.category.usage_type)
    if found is None or found[0] not in wanted or not sku.pricing_info:
        return None
    expression = sku.pricing_info[-1].pricing_expression
    if expression.usage_unit not in _PER_HOUR or not expression.tiered_rates:
        return None
    money = expression.tiered_rates[0].unit_price  # the rate from the first unit used (GPU SKUs have one tier)
    price = int(money.units) + money.nanos / 1e9
    return Sku(found[0], found[1], tuple(sku.service_regions), expression.usage_unit, price)


def names(value: str | list[str] | None) -> tuple[str, ...]:
    """A `billing` entry's SKU names: one, or several (a GPU called differently in its Spot or DWS SKUs)."""
    return (value,) if isinstance(value, str) else tuple(value or ())


def wanted_bases(billing: dict) -> set[str]:
    wanted = {n for value in billing["gpus"].values() for n in names(value)}
    for parts in billing["families"].values():
        wanted.update(n for value in parts.values() for n in names(value))
    return wanted


def node_price(skus: list[Sku], billing: dict, machine: Any, region: str, provisioning: str) -> float | None:
    """One node's hourly price in `region` under `provisioning`, composed as Google bills the family; None when
    a part has no SKU there."""
    parts = billing["families"].get(machine.family)
    if not parts:
        return None

    def rate(base: str | list[str] | None) -> float | None:
        wanted = names(base)
        for sku in skus:
            if sku.base in wanted and sku.provisioning == provisioning and region in sku.regions:
                return sku.price * _PER_HOUR[sku.unit]
        return None

    if "vm_slice" in parts:
        slice_price = rate(parts["vm_slice"])
        return None if slice_price is None else machine.gpu_count * slice_price
    amounts = [(billing["gpus"].get(machine.gpu.name), machine.gpu_count), (parts.get("core"), machine.vcpus),
               (parts.get("ram"), machine.memory_mb / 1024)]
    if machine.local_ssds:
        amounts.append((parts.get("local_ssd"), machine.local_ssds * LOCAL_SSD_GIB))
    total = 0.0
    for base, amount in amounts:
        per = rate(base)
        if per is None:
            return None
        total += per * amount
    return total
