"""The Monitoring emulator's reductions (issue 27): the vectorized pass that serves 8,192 series gives what the
plain per-series path gives, for every aligner and reducer it takes."""

from __future__ import annotations

import random

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

