"""The price book: Billing Catalog SKUs cached on this machine, refreshed when stale, or the bundled table.

Where prices come from, in order:
  1. the cache, $XDG_CACHE_HOME/gcpgpu/prices.json (~/.cache/gcpgpu; the emulator's in prices-emulator-HOST-PORT.json,
     so its snapshot never stands in for Google's), when it was read less than MAX_AGE_DAYS ago;
  2. Google's Cloud Billing Catalog API (services.list, then services.skus.list of Compute Engine, in USD) through
     google-cloud-billing's CloudCatalogClient, when credentials allow: Application Default Credentials found
     as a file ($GOOGLE_APPLICATION_CREDENTIALS or gcloud's application_default_credentials.json), or the
     emulator; what it read is cached with the time it was read;
  3. an older cache, saying how old it is and why it was not refreshed;
  4. the bundled table (gcpgpu/data/machines.yaml), one price per machine type whatever the region, saying so.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .skus import Sku

MAX_AGE_DAYS = 7
CATALOG = "Cloud Billing Catalog"
FALLBACK = "bundled table (offline fallback)"
DEFAULT_REGION = "us-central1"


@dataclass(frozen=True)
class NodePrices:
    """One node's hourly USD prices in a region, and where they come from."""

    machine_type: str
    region: str
    on_demand: float | None
    spot: float | None
    flex_start: float | None
    reserved: float | None
    source: str
    as_of: str

    def of(self, provisioning: str | None) -> float | None:
        """The price under a provisioning model (STANDARD, SPOT, FLEX_START, RESERVATION_BOUND)."""
        key = (provisioning or "STANDARD").upper().replace("-", "_")
        return {"STANDARD": self.on_demand, "SPOT": self.spot, "FLEX_START": self.flex_start,
                "RESERVATION_BOUND": self.reserved}.get(key)


@dataclass(frozen=True)
class Book:
    """Prices for every machine type and region: SKUs from the catalog, or None for the bundled table."""

    skus: tuple[Sku, ...] | None
    read_at: float | None  # when the SKUs were read from the API
    note: str  # one sentence: where the prices come from, how old, why not fresher

    @property
    def source(self) -> str:
        return CATALOG if self.skus is not None else FALLBACK

    def node(self, machine: Any, region: str | None = None) -> NodePrices:
        from gcpgpu import catalog

        region = region or DEFAULT_REGION
        fallback = NodePrices(machine.name, region, machine.price_per_hour, machine.spot_price_per_hour, None,
                              machine.price_per_hour, FALLBACK, catalog.price_as_of(machine))
        if self.skus is None:
            return fallback
        from .skus import node_price

        table = catalog.billing()

        def price(model: str) -> float | None:
            value = node_price(list(self.skus or ()), table, machine, region, model)
            return None if value is None else round(value, 4)

        found = NodePrices(machine.name, region, price("STANDARD"), price("SPOT"), price("FLEX_START"),
                           price("RESERVATION_BOUND"), CATALOG, _day(self.read_at))
        # A family or region the catalog read has no SKUs for (G2 here): the table's figure, labelled as such.
        known = (found.on_demand, found.spot, found.flex_start, found.reserved)
        return found if any(v is not None for v in known) else fallback

    def price(self, machine_type: str, provisioning: str | None, region: str | None = None) -> float | None:
        """A node's hourly price, or None (an unknown machine type has no price: not an error)."""
        from gcpgpu import catalog

        try:
            machine = catalog.get_machine_type(machine_type)
        except Exception:
            return None
        return self.node(machine, region).of(provisioning)


def _day(at: float | None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at)) if at else "-"


def cache_file(emulator: str | None, environ: Any = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base and os.path.isabs(base) else Path("~/.cache").expanduser()
    name = f"prices-emulator-{emulator.replace(':', '-')}.json" if emulator else "prices.json"
    return root / "gcpgpu" / name


def _read(path: Path) -> tuple[tuple[Sku, ...], float] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return tuple(Sku.from_json(s) for s in data["skus"]), float(data["read_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none yet, or one this version cannot read: read the catalog again


def _write(path: Path, skus: tuple[Sku, ...], read_at: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"read_at": read_at, "source": f"{CATALOG} API, Compute Engine SKUs in USD",
                               "skus": [s.to_json() for s in skus]}), encoding="utf-8")
    os.replace(tmp, path)


def _credentials_problem(emulator: str | None) -> str | None:
    """Why the catalog cannot be read from here, or None when it may be (no network probe)."""
    if emulator:
        return None
    from gcpgpu.settings import gcloud_config_dir

    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
    if (explicit and Path(explicit).is_file()) or (
            gcloud_config_dir(os.environ) / "application_default_credentials.json").is_file():
        return None
    return "no Application Default Credentials ('gcloud auth application-default login')"


def fetch(emulator: str | None) -> tuple[Sku, ...]:
    """Compute Engine's SKUs for the catalogued families, read through CloudCatalogClient."""
    from gcpgpu import catalog
    from gcpgpu.gcp.clients import Clients

    from .skus import from_api, wanted_bases

    client = Clients(emulator=emulator).billing_catalog()
    service = next((s for s in client.list_services(request={"page_size": 5000}, timeout=60)
                    if s.display_name == "Compute Engine"), None)
    if service is None:
        raise LookupError("the Billing Catalog lists no Compute Engine service")
    wanted = wanted_bases(catalog.billing())
    found = (from_api(s, wanted) for s in client.list_skus(
        request={"parent": service.name, "currency_code": "USD", "page_size": 5000}, timeout=60))
    return tuple(s for s in found if s is not None)


def load(emulator: str | None, *, refresh: bool = False, now: float | None = None, online: bool = True) -> Book:
    """The price book as the module docstring orders its sources; `online` False never calls the API."""
    now = time.time() if now is None else now
    path = cache_file(emulator)
    cached = _read(path)
    if cached and not refresh and now - cached[1] <= MAX_AGE_DAYS * 86400:
        return Book(cached[0], cached[1], f"prices from the {CATALOG}, read {_day(cached[1])} (cached)")
    why = _credentials_problem(emulator) if online else "a plan calls no API ('gcpgpu catalog' reads it)"
    if why is None:
        try:
            skus = fetch(emulator)
        except Exception as e:  # any failure to read leaves the older figures in use, said
            why = f"reading it failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        else:
            _write(path, skus, now)
            return Book(skus, now, f"prices from the {CATALOG}, read {_day(now)}")
    if cached:
        days = (now - cached[1]) / 86400
        return Book(cached[0], cached[1], f"prices from the {CATALOG} cached {days:.0f} days ago "
                                          f"({_day(cached[1])}), not refreshed: {why}")
    return Book(None, None, f"prices from the {FALLBACK}, not the {CATALOG}: {why}")


_BOOKS: dict[tuple, Book] = {}


def current(*, fetch: bool = True) -> Book:
    """The book of the command running: loaded once per invocation, against the Google its global options name
    (--emulator / GCPGPU_EMULATOR, else Google's own). `fetch` False (a plan, which calls no API) and outside a
    gcpgpu command (a library caller, a unit test) it never calls an API: the cache, else the bundled table."""
    import click

    ctx = click.get_current_context(silent=True)
    settings = ctx.find_root().obj if ctx is not None else None
    in_command = settings is not None and hasattr(settings, "emulator")
    emulator = settings.emulator if in_command else None
    online = in_command and fetch
    key = (id(ctx.find_root()) if ctx is not None else None, online, emulator, str(cache_file(emulator)))
    if key not in _BOOKS:
        if len(_BOOKS) > 32:  # one per command: a long-lived process (the test suite) keeps a few
            _BOOKS.clear()
        _BOOKS[key] = load(emulator, online=online)
    return _BOOKS[key]
