"""An aggregated ListTimeSeries answer kept as columns, not as a dict and a list of points per series.

`cluster` views of 1,024 nodes ask for 1,024 or 8,192 aligned series a call, a dozen calls a refresh.
Kept as the output headers plus one grid of values (a row per output series, a column per aligned
bucket, newest first), the answer costs a few numpy operations to make; it still reads as the list
of series dicts the backend's callers take (REST's JSON, tests), and the gRPC front end encodes it
from the grid (wire.py) without a message per point.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from .aggregate import Point


class Columns(Sequence[dict]):
    """Output series `rows` (indexes into `heads`, in answer order) with their points in the grid.

    values[g, k] is output series g's value at bucket k (stamped at stamps[k]); mask[g, k] says whether
    it has one. Series without any point are left out, as ListTimeSeries leaves them out. `encoded` is
    a cache the gRPC front end keeps the headers' wire bytes in, shared while the headers are.
    """

    def __init__(self, heads: list[dict], order: Sequence[int], stamps: np.ndarray, values: np.ndarray,
                 mask: np.ndarray, period: float, delta: bool, encoded: dict | None = None,
                 rows: np.ndarray | None = None) -> None:
        self.heads = heads
        self.stamps = stamps
        self.values = values
        self.mask = mask
        self.period = period
        self.delta = delta  # DELTA points start a period before they end
        self.encoded = encoded if encoded is not None else {}
        if rows is None:
            ordered = np.asarray(order, dtype=np.int64)
            rows = ordered[mask.any(axis=1)[ordered]] if len(ordered) else ordered
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> dict: ...

    @overload
    def __getitem__(self, i: slice) -> Columns: ...

    def __getitem__(self, i: int | slice) -> dict | Columns:
        if isinstance(i, slice):
            return Columns(self.heads, (), self.stamps, self.values, self.mask, self.period, self.delta, self.encoded,
                           self.rows[i])
        g = int(self.rows[i])
        return {**self.heads[g], "points": self.points(g)}

    def __iter__(self) -> Iterator[dict]:
        for i in range(len(self.rows)):
            yield self[i]

    def points(self, g: int) -> list[Point]:
        """Output series g's points, newest first, as the dict form carries them."""
        present = self.mask[g]
        ends = self.stamps[present]
        begins = ends - self.period if self.delta else ends
        return list(zip(begins.tolist(), ends.tolist(), self.values[g][present].tolist(), strict=False))

    def begins(self) -> np.ndarray:
        """Each bucket's start time as its points carry it."""
        return self.stamps - self.period if self.delta else self.stamps

    def __repr__(self) -> str:
        return f"Columns({len(self)} series x {len(self.stamps)} buckets)"

