"""gcpgpu/times.py: the one duration grammar every option reads, and the one RFC 3339 reader."""

from __future__ import annotations

import pytest

from gcpgpu.errors import UsageProblem
from gcpgpu.times import format_duration, format_timestamp, parse_duration, parse_timestamp

DAY = 86400


@pytest.mark.parametrize(("value", "seconds"), [
    ("90m", 5400), ("2h", 7200), ("1d", DAY), ("3600s", 3600), ("600", 600), ("30s", 30),  # every flag's old forms
    ("1h30m", 5400), ("2w", 14 * DAY), ("1.5h", 5400),  # --since's forms, now everyone's
    (" 90 m ", 5400), ("1H", 3600), ("1h 30m", 5400),  # spaces and capitals, as --since read them
    (3600, 3600), (90.5, 90),  # a spec file's number: seconds
])
def test_one_grammar_reads_every_form_an_option_took(value, seconds):
    assert parse_duration(value, "--x", at_most=30 * DAY) == seconds


@pytest.mark.parametrize("value", ["soon", "", "  ", "-5m", "1.2.3m", "m", "5y", "1h-30m", "0x10", True, None, [60],
                                   float("inf"), float("-inf"), float("nan")])
def test_anything_else_is_one_line_naming_the_option(value):
    with pytest.raises(UsageProblem) as e:
        parse_duration(value, "--autostop", at_most=30 * DAY)
    assert str(e.value).startswith("--autostop ") and "is not a duration; write e.g. 90m" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["9" * 400 + "d", "9" * 400, "1" + "0" * 400 + "w", 10**5000, -(10**5000)],
                         ids=["nines-d", "nines", "googol-w", "huge-int", "huge-negative-int"])
def test_a_number_past_any_float_is_out_of_range_not_an_overflow(value):
    with pytest.raises(UsageProblem, match=r"^--timeout .* is out of range: give between 1s and 7d$") as e:
        parse_duration(value, "--timeout", at_least=1, at_most=7 * DAY)
    assert len(str(e.value)) < 200  # the value is shown cut short


def test_bounds_are_the_callers_and_so_are_their_words():
    assert parse_duration("30d", "--autostop", at_least=60, at_most=30 * DAY) == 30 * DAY  # bounds included
    with pytest.raises(UsageProblem, match="^--autostop '31d' is out of range: give between 1m and 30d$"):
        parse_duration("31d", "--autostop", at_least=60, at_most=30 * DAY)
    words = {"at_least": 60, "at_most": 42 * DAY, "too_short": "shorter than a minute", "too_long": "too long"}
    with pytest.raises(UsageProblem, match="^--since '30s' is shorter than a minute$"):
        parse_duration("30s", "--since", **words)
    with pytest.raises(UsageProblem, match="^--since '7w' is too long$"):
        parse_duration("7w", "--since", **words)
    with pytest.raises(UsageProblem, match="^--start 'soon' must be a time$"):
        parse_duration("soon", "--start", at_most=DAY, malformed="must be a time")


@pytest.mark.parametrize(("text", "epoch"), [
    ("2026-01-01T00:00:00Z", 1767225600.0),
    ("2026-01-01T00:00:00.5Z", 1767225600.5),
    ("2026-01-01T00:00:00.123456789Z", 1767225600.123456789),  # Vertex AI's nanoseconds
    ("2025-12-31T16:00:00.000-08:00", 1767225600.0),  # Compute Engine's offsets
    ("2026-01-01T05:30:00+05:30", 1767225600.0),
    ("2026-01-01T00:00:00", 1767225600.0),  # no offset: UTC
    ("2026-01-01t00:00:00z", 1767225600.0),
    (" 2026-01-01T00:00:00Z\n", 1767225600.0),
])
def test_one_reader_for_every_rfc3339_time_google_writes(text, epoch):
    assert parse_timestamp(text) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize("text", [None, "", "soon", "2026-01-01", "2026-02-30T00:00:00Z", "2026-01-01T25:00:00Z",
                                  "2026-01-01T00:00:00+0800", "2d", 1767225600])
def test_anything_else_reads_as_no_time(text):
    assert parse_timestamp(text) is None


def test_formatting_round_trips():
    assert format_timestamp(1767225600.7) == "2026-01-01T00:00:00Z"
    assert parse_timestamp(format_timestamp(1767225600)) == 1767225600
    assert [format_duration(s) for s in (0, 59, 90, 3600, 11100, 2 * DAY + 4 * 3600, -5)] == \
        ["0s", "59s", "1m30s", "1h", "3h05m", "2d4h", "0s"]
