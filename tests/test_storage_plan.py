"""`gcpgpu plan storage`: tier and size from tokens/s, bytes/token, checkpoint size and save time."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.storage import sizing, tiers


def plan(*args: str):
    return CliRunner().invoke(main, ["--format", "json", "plan", "storage", *args])


def test_the_recommendation_meets_the_read_write_and_space_the_formula_asks_for():
    # 100 GiB in 2 min = 853.3 MiB/s of writes; 400k tokens/s x 2 B = 0.76 MiB/s of reads; 200 GiB kept.
    result = plan("--tokens-per-second", "400000", "--bytes-per-token", "2", "--checkpoint-size", "100GiB",
                  "--save-time", "2m")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    best = rows[0]
    assert best["flag"] == "--lustre 9000GiB --lustre-tier 1000"  # Lustre's smallest instance already does it
    zonal = next(r for r in rows if r["tier"] == "ZONAL")
    # Zonal promises 88 MiB/s of writes per TiB: 853.3 / 88 TiB = 9,929 GiB, up to the 256 GiB step.
    assert zonal["size_gib"] == 9984 and zonal["write_mib_s"] >= 853
    assert all(r["size_gib"] is None for r in rows if r["tier"].startswith("BASIC"))  # no per-TiB promise


def test_each_size_is_the_smallest_valid_one_that_covers_the_need():
    need = sizing.need(tokens_per_s=5e6, bytes_per_token=4, checkpoint_gib=2048, save_s=30, keep=3, data_gib=10240)
    for option in sizing.options(need):
        if option.size_gib is None:
            continue
        t, size = option.tier, option.size_gib
        assert t.holds(size)
        assert t.read_rate(size) >= need.read_mib_s and t.write_rate(size) >= need.write_mib_s
        assert size >= need.space_gib
        smaller = [b for b in t.bands if b.holds(size - b.step)]
        assert not smaller or not (t.write_rate(size - smaller[0].step) >= need.write_mib_s
                                   and t.read_rate(size - smaller[0].step) >= need.read_mib_s
                                   and size - smaller[0].step >= need.space_gib)


def test_a_need_beyond_every_tier_fits_none_and_help_gives_the_formula():
    rows = json.loads(plan("--tokens-per-second", "1e9", "--bytes-per-token", "1000", "--checkpoint-size", "1TiB",
                           "--save-time", "1s").stdout)
    assert all(r["size_gib"] is None for r in rows if r["service"] == "filestore")
    help_text = CliRunner().invoke(main, ["plan", "storage", "--help"]).output
    assert "read  = tokens/s x bytes/token" in help_text and "write = checkpoint size / save time" in help_text
    assert tiers.LUSTRE["1000"].read_rate(9000) < 9000  # MB/s per TiB, shown as MiB/s


def test_bad_input_is_one_line_exit_2():
    for args, needle in ((["--checkpoint-size", "lots", "--save-time", "1m"], "--checkpoint-size 'lots'"),
                         (["--checkpoint-size", "1TiB", "--save-time", "0s"], "--save-time '0s'")):
        result = plan("--tokens-per-second", "1", "--bytes-per-token", "2", *args)
        assert result.exit_code == 2 and needle in result.output, result.output
