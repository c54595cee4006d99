"""Prices from the Cloud Billing Catalog: the emulator serves Google's API from its snapshot, Google's client
reads it, and `gcpgpu catalog` composes each node's price from its SKUs, caches them, and says where prices
came from when it cannot read them."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

# The snapshot's SKUs (gcpgpu/fakes/data/billing_catalog.yaml), USD per unit: GPUs and vCPUs per hour, RAM per
# GiB-hour, Local SSD per GiB-month (730 hours).
H100 = {"us-central1": (9.796550569, 5.605588818, 4.189690409), "us-east5": (11.183200708, 4.169560198, 4.782719021)}
A3_CORE = {"us-central1": (0.025500461, 0.014591371, 0.010905781), "us-east5": (0.025500461, 0.009507628, 0.010905781)}
A3_RAM = {"us-central1": (0.002220067, 0.001270323, 0.000949456), "us-east5": (0.002220067, 0.000827733, 0.000949456)}
SSD = {"us-central1": (0.08, 0.0428, 0.08), "us-east5": (0.08, 0.048, 0.08)}  # on-demand, Spot, DWS
H200 = (9.31174, 5.595642152, 3.982351491)  # "running in Americas": both regions
A3U_CORE = (0.015972972, 0.009598532, 0.00683116)
A3U_RAM = (0.001390605, 0.000835647, 0.00059472)
B200_SLICE = (16.11, 4.9542, 6.889763087)  # A4: one whole-VM SKU per GPU
MODELS = ("price_per_hour", "spot_price_per_hour", "flex_start_price_per_hour")


def expected(region: str) -> dict[str, list[float]]:
    """Each node's on-demand, Spot and flex-start price, by hand from the SKUs above."""
    return {
        # 8 H100s, 208 vCPUs, 1872 GiB, 16 x 375 GiB Local SSD
        "a3-highgpu-8g": [8 * H100[region][i] + 208 * A3_CORE[region][i] + 1872 * A3_RAM[region][i]
                          + 6000 * SSD[region][i] / 730 for i in range(3)],
        # 8 H200s, 224 vCPUs, 2952 GiB, 32 x 375 GiB Local SSD
        "a3-ultragpu-8g": [8 * H200[i] + 224 * A3U_CORE[i] + 2952 * A3U_RAM[i] + 12000 * SSD[region][i] / 730
                           for i in range(3)],
        "a4-highgpu-8g": [8 * B200_SLICE[i] for i in range(3)],
    }


def catalog_json(*argv: str) -> dict[str, dict]:
    result = CliRunner().invoke(main, ["--format", "json", "catalog", *argv])
    assert result.exit_code == 0, result.output
    return {row["name"]: row for row in json.loads(result.stdout)}


def billing_requests(gcp) -> list:
    return gcp.requests.all(contains="/v1/services")


@pytest.mark.parametrize("region", ["us-central1", "us-east5"])
def test_catalog_prices_each_node_from_the_billing_catalogs_skus(gcp, region):
    rows = catalog_json("--region", region)
    for name, prices in expected(region).items():
        row = rows[name]
        assert (row["region"], row["price_source"]) == (region, "Cloud Billing Catalog")
        assert [row[m] for m in MODELS] == pytest.approx(prices, abs=1e-4), name
    assert billing_requests(gcp), "the prices were not read from the emulated Billing Catalog"
    # A whole a3-highgpu-8g, not eight bare H100s (the old table's $55.84)
    assert rows["a3-highgpu-8g"]["price_per_hour"] > 8 * H100[region][0] + 5


def test_regions_differ_where_google_prices_them_apart(gcp):
    central, east = catalog_json("--region", "us-central1"), catalog_json("--region", "us-east5")
    assert central["a3-highgpu-8g"]["price_per_hour"] != east["a3-highgpu-8g"]["price_per_hour"]


def test_the_catalog_is_read_once_then_from_the_cache(gcp):
    catalog_json()
    assert any("/skus" in r.path for r in billing_requests(gcp))
    gcp.requests.clear()
    again = catalog_json("--region", "us-east5")  # another region: the cache holds every region's SKUs
    assert billing_requests(gcp) == []
    assert again["a4-highgpu-8g"]["price_source"] == "Cloud Billing Catalog"


def test_a_week_old_cache_is_read_again(gcp):
    from gcpgpu.pricing.book import cache_file

    catalog_json()
    path = cache_file(gcp.address)
    data = json.loads(path.read_text())
    data["read_at"] = time.time() - 8 * 86400
    path.write_text(json.dumps(data))
    gcp.requests.clear()
    catalog_json()
    assert any("/skus" in r.path for r in billing_requests(gcp))
    assert time.time() - json.loads(path.read_text())["read_at"] < 3600


def test_offline_it_says_it_fell_back_to_the_bundled_table():
    result = CliRunner().invoke(main, ["catalog"])  # no emulator, no credentials
    assert result.exit_code == 0, result.output
    assert "bundled table (offline fallback)" in result.stderr and "no Application Default Credentials" in result.stderr
    rows = catalog_json()
    assert rows["a3-highgpu-8g"]["price_source"] == "bundled table (offline fallback)"
    assert rows["a3-highgpu-8g"]["price_per_hour"] == 88.49  # the whole VM, not 8 x 6.98
    assert rows["a4-highgpu-8g"]["price_per_hour"] == 8 * 16.11


def test_an_old_cache_it_cannot_refresh_says_how_old(monkeypatch):
    from gcpgpu.pricing.book import cache_file
    from gcpgpu.pricing.skus import Sku

    path = cache_file(None)
    path.parent.mkdir(parents=True, exist_ok=True)
    sku = Sku("A4 Nvidia B200 (1 gpu slice)", "STANDARD", ("us-central1",), "h", 15.0)
    path.write_text(json.dumps({"read_at": time.time() - 9 * 86400, "skus": [sku.to_json()]}))
    result = CliRunner().invoke(main, ["catalog"])
    assert result.exit_code == 0, result.output
    assert "cached 9 days ago" in result.stderr and "not refreshed" in result.stderr
    assert catalog_json()["a4-highgpu-8g"]["price_per_hour"] == 8 * 15.0


@pytest.mark.parametrize(("provisioning", "index", "flags"), [
    ("standard", 0, []), ("spot", 1, ["--spot"]), ("flex-start", 2, ["--flex-start", "4h"])])
def test_cluster_plan_costs_the_regions_price_flex_start_too(gcp, provisioning, index, flags):
    catalog_json()  # reads the Billing Catalog into the cache, which a plan (calling no API) reads
    gcp.requests.clear()
    result = CliRunner().invoke(main, ["--format", "json", "--project", "test-proj", "cluster", "plan", "c",
                                       "--machine-type", "a3-ultragpu-8g", "--nodes", "2", "--region", "us-east5",
                                       *flags])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.stdout)
    assert planned["costPerHourUsd"] == pytest.approx(2 * expected("us-east5")["a3-ultragpu-8g"][index], abs=0.01)
    assert planned["priceSource"] == "Cloud Billing Catalog"
    assert gcp.requests.all() == []


def test_cost_so_far_prices_a_flex_start_node_in_its_region(gcp):
    from gcpgpu.cluster import cost

    class Node:
        name, status, machine_type, provisioning = "x-0", "RUNNING", "a3-highgpu-8g", "FLEX_START"
        created = last_start = "2026-01-01T00:00:00.000-00:00"
        last_stop, zone, region = "", "us-east5-a", "us-east5"

    import click

    from gcpgpu import times
    from gcpgpu.settings import Settings

    with click.Context(main, obj=Settings(emulator=gcp.address)):  # as inside `cluster status`
        run = cost.node_run(Node(), now=times.parse_timestamp(Node.last_start) + 7200)
    assert run.cost == pytest.approx(2 * expected("us-east5")["a3-highgpu-8g"][2], abs=0.01)


def test_unknown_region_exits_2_before_any_call(gcp):
    from helpers import refused

    line = refused(gcp, "catalog", "--region", "mars-north1")
    assert line.startswith("Error: --region 'mars-north1' is not a region the catalog knows")


# --- the emulated API, read by Google's own client ------------------------------------------------------------


def _client(gcp):
    from gcpgpu.gcp.clients import Clients

    return Clients(emulator=gcp.address).billing_catalog()


def test_googles_client_pages_through_the_skus_and_converts_currency(gcp):
    client = _client(gcp)
    service = next(s for s in client.list_services() if s.display_name == "Compute Engine")
    assert service.name == "services/6F81-5844-456A"
    usd = list(client.list_skus(request={"parent": service.name, "page_size": 10}))
    assert len(gcp.requests.all(contains="/skus")) > 1  # more than one page, followed by the pager
    eur = list(client.list_skus(request={"parent": service.name, "currency_code": "EUR"}))
    assert [s.sku_id for s in eur] == [s.sku_id for s in usd]
    first_usd, first_eur = (s.pricing_info[0] for s in (usd[0], eur[0]))
    rate = first_eur.currency_conversion_rate
    money = first_eur.pricing_expression.tiered_rates[0].unit_price
    usd_money = first_usd.pricing_expression.tiered_rates[0].unit_price
    assert money.currency_code == "EUR" and rate != 1
    assert int(money.units) + money.nanos / 1e9 == pytest.approx((int(usd_money.units) + usd_money.nanos / 1e9) * rate)


def test_the_front_end_refuses_what_google_refuses(gcp):
    import requests

    first = requests.get(f"http://{gcp.address}/v1/services", params={"pageSize": "1"}, timeout=10).json()
    assert len(first["services"]) == 1 and first["nextPageToken"]
    rest = requests.get(f"http://{gcp.address}/v1/services", timeout=10,
                        params={"pageSize": "5", "pageToken": first["nextPageToken"]}).json()
    assert "nextPageToken" not in rest and first["services"][0] not in rest["services"]
    base = f"http://{gcp.address}/v1/services/6F81-5844-456A/skus"
    assert requests.get(base, params={"pageSize": "2"}, timeout=10).status_code == 200
    assert requests.get(base, params={"filter": "gpu"}, timeout=10).status_code == 400  # no such parameter
    assert requests.get(base, params={"currencyCode": "XYZ"}, timeout=10).status_code == 400
    assert requests.get(base, params={"pageToken": "bogus"}, timeout=10).status_code == 400
    assert requests.get(f"http://{gcp.address}/v1/services/0000-0000-0000/skus", timeout=10).status_code == 404


def test_every_served_sku_fits_the_discovery_documents_schema():
    from gcpgpu.fakes.billing.catalog import skus
    from gcpgpu.fakes.core import ApiError
    from gcpgpu.fakes.schema import check

    assert len(skus()) > 50  # each was checked as it was built
    bad = json.loads(json.dumps(skus()[0]))
    bad["pricingInfo"][0]["price"] = 1
    with pytest.raises(ApiError):
        check("cloudbilling.v1", "Sku", bad, "sku")


@pytest.mark.parametrize(("description", "usage", "found"), [
    ("Nvidia H100 80GB GPU running in Americas", "OnDemand", ("Nvidia H100 80GB GPU", "STANDARD")),
    ("Nvidia H100 80GB Mega GPU attached to Spot Preemptible VMs running in Tokyo", "Preemptible",
     ("Nvidia H100 80GB Mega GPU", "SPOT")),
    ("Spot Preemptible A3 Instance Core running in Americas", "Preemptible", ("A3 Instance Core", "SPOT")),
    ("Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas", "OnDemand",  # Google tags it OnDemand
     ("A4 Nvidia B200 (1 gpu slice)", "SPOT")),
    ("Nvidia H100 Mega 80GB GPU attached to DWS Defined Duration VMs running in Americas", "OnDemand",
     ("Nvidia H100 Mega 80GB GPU", "FLEX_START")),
    ("Reserved A2 Ram in Netherlands", "OnDemand", ("A2 Ram", "RESERVATION_BOUND")),
    ("SSD backed Local Storage", "OnDemand", ("SSD backed Local Storage", "STANDARD")),
    ("Reserved Nvidia H100 80GB Mega GPU in Americas in Calendar Mode", "OnDemand", None),
    ("Commitment v1: H200 141GB GPU running in Americas for 3 Years", "Commit3Yr", None),
])
def test_sku_descriptions_as_billing_catalog_readers_record_them(description, usage, found):
    """Provisioning from the description (Google tags DWS, reserved and some Spot SKUs OnDemand); wordings from
    the sources gcpgpu/fakes/data/billing_catalog.yaml cites."""
    from gcpgpu.pricing.skus import classify

    assert classify(description, usage) == found
