"""The Monitoring emulator's reductions (issue 27): the vectorized pass that serves 8,192 series gives what the
plain per-series path gives, for every aligner and reducer it takes."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from gcpgpu.fakes.monitoring import aggregate

E = 6000.0


@pytest.mark.parametrize("aligner", ["ALIGN_MEAN", "ALIGN_RATE", "ALIGN_SUM", "ALIGN_COUNT", "ALIGN_MIN", "ALIGN_MAX",
                                     "ALIGN_NEXT_OLDER"])
@pytest.mark.parametrize("reducer", ["REDUCE_NONE", "REDUCE_MEAN", "REDUCE_SUM", "REDUCE_COUNT", "REDUCE_MIN",
                                     "REDUCE_MAX"])
def test_the_vectorized_pass_matches_align_then_reduce(aligner, reducer):
    rng = random.Random(f"{aligner}{reducer}")
    series = []
    for _ in range(12):  # uneven sampling, some points outside [S, E], some buckets empty
        times = sorted({round(rng.uniform(E - 700, E + 30), 1) for _ in range(rng.randint(0, 25))})
        series.append([(t, t, rng.uniform(0, 100)) for t in times])
    groups = [i % 3 for i in range(len(series))] if reducer != "REDUCE_NONE" else list(range(len(series)))
    n_groups = 3 if reducer != "REDUCE_NONE" else len(series)
    got = aggregate.align_and_reduce([aggregate.as_arrays(s, "GAUGE", aligner) for s in series], groups, n_groups,
                                     aligner, reducer, E - 600, E, 60)
    aligned = [aggregate.align(s, "GAUGE", aligner, E - 600, E, 60) for s in series]
    if reducer == "REDUCE_NONE":
        want = aligned
    else:
        members: dict[tuple, list[dict[float, float]]] = {}
        for i, a in enumerate(aligned):
            members.setdefault((groups[i],), []).append(a)
        reduced = aggregate.reduce(members, reducer)
        want = [reduced.get((g,), {}) for g in range(n_groups)]
    assert [sorted(g) for g in got] == [sorted(w) for w in want]
    for g, w in zip(got, want, strict=True):
        assert all(g[t] == pytest.approx(w[t]) for t in w)



@pytest.mark.parametrize("aligner", ["ALIGN_MEAN", "ALIGN_RATE", "ALIGN_DELTA", "ALIGN_MIN", "ALIGN_MAX", "ALIGN_NEXT_OLDER"])
@pytest.mark.parametrize("reducer", ["REDUCE_NONE", "REDUCE_MEAN", "REDUCE_SUM", "REDUCE_MIN", "REDUCE_MAX"])
def test_series_given_as_batches_that_share_times_grid_as_the_same_series_one_by_one(aligner, reducer):
    """How the made-up series of 1,024 nodes come (a batch of VMs that share their sample times, a row
    of values each, in no particular order of series) must not change what they align and reduce to."""
    rng = np.random.default_rng(zlib.crc32(f"{aligner}/{reducer}".encode()))
    n = 30
    order = rng.permutation(n)  # batches hold series in any order
    batches, one_by_one = [], [None] * n
    for b, chunk in enumerate(np.array_split(order, 4)):
        # The first batch ran for the last two minutes only: its series have empty buckets.
        choices = np.arange(E - 120, E + 60, 30.0) if b == 0 else np.arange(E - 900, E + 60, 30.0)
        times = np.sort(rng.choice(choices, size=rng.integers(1, 6 if b == 0 else 20), replace=False))
        values = rng.uniform(0, 100, size=(len(chunk), len(times)))
        batches.append((chunk, times, values))
        for row, i in enumerate(chunk):
            one_by_one[i] = (times, values[row])
    groups = [i % 4 for i in range(n)] if reducer != "REDUCE_NONE" else list(range(n))
    n_groups = 4 if reducer != "REDUCE_NONE" else n
    got = aggregate.grid(aggregate.Batches(batches, n), groups, n_groups, aligner, reducer, E - 600, E, 60)
    want = aggregate.grid(one_by_one, groups, n_groups, aligner, reducer, E - 600, E, 60)
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[2], want[2])
    if reducer == "REDUCE_NONE":
        assert got[2].any() and not got[2].all()  # some buckets empty, some not: the mask is tested too
    assert np.allclose(got[1][got[2]], want[1][want[2]])
