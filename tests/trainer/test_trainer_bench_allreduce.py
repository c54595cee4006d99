"""The all-reduce benchmark: its bus-bandwidth formula, its size parsing, and a run on 2 CPU ranks."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _trainer_helpers import REPO, base_env, run

from gcpgpu.trainer.bench_allreduce import format_row, parse_size, sizes
from gcpgpu.trainer.metrics import busbw


def test_busbw_is_algbw_times_2_n_minus_1_over_n():
    assert busbw(100.0, 2) == pytest.approx(100.0)  # 2 ranks: each link carries the message once
    assert busbw(100.0, 8) == pytest.approx(175.0)  # 2 * 7 / 8
    assert busbw(100.0, 16) == pytest.approx(187.5)
    assert busbw(100.0, 1) == 0.0  # nothing crosses a link


def test_sizes_and_units():
    assert parse_size("8") == 8 and parse_size("64K") == 65536 and parse_size("1G") == 1 << 30
    assert parse_size("128MB") == 128 << 20
    with pytest.raises(ValueError):
        parse_size("lots")
    assert sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert sizes(8, 100, 4) == [8, 32]


def test_row_figures():
    # 1 GB in 10 ms on 8 ranks: algbw 100 GB/s, busbw 175 GB/s.
    row = format_row(10**9, 250_000_000, "float32", 0.010, 8, 0).split()
    assert row[0] == "1000000000" and float(row[4]) == pytest.approx(10_000.0)
    assert float(row[5]) == pytest.approx(100.0) and float(row[6]) == pytest.approx(175.0) and row[7] == "0"


@pytest.mark.multiprocess
def test_runs_on_two_cpu_ranks():
    pytest.importorskip("torch")
    rank0, rank1 = run(2, ["--min-bytes", "8", "--max-bytes", "64K", "--factor", "8", "--iters", "3"],
                       module="gcpgpu.trainer.bench_allreduce")
    lines = rank0.stdout.splitlines()
    assert "2 ranks, backend gloo" in lines[0]
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [8, 64, 512, 4096, 32768]
    for r in rows:
        algbw, bus, wrong = float(r[5]), float(r[6]), int(r[7])
        assert wrong == 0 and bus == pytest.approx(algbw, abs=0.011)  # n = 2: busbw equals algbw
    assert rank1.stdout == ""  # only rank 0 prints


def test_bad_size_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "gcpgpu.trainer.bench_allreduce", "--max-bytes", "1Q"],
                          cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--max-bytes" in proc.stderr
