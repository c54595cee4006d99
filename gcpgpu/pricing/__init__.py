"""What a node costs per hour, per region and provisioning model: from Google's Cloud Billing Catalog API, cached
on this machine, with the bundled table (gcpgpu/data/machines.yaml) as the offline fallback.

skus.py   Billing Catalog SKUs as gcpgpu keeps them, and a node's price composed from them the way Google bills
          its family (GPU + vCPU + memory + bundled Local SSD, or a whole-VM SKU per GPU)
book.py   the price book: the cache under $XDG_CACHE_HOME/gcpgpu, refreshed through google-cloud-billing's
          CloudCatalogClient when older than a week and credentials allow, else the fallback, saying which
"""

from __future__ import annotations

from .book import Book, NodePrices, current, load

__all__ = ["Book", "NodePrices", "current", "load"]
