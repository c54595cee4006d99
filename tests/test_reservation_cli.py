"""Issue 28: `gcpgpu reservation` and `cluster up --wait-for-start` on the emulator: a calendar-mode
future reservation advised, created, waited for and consumed; bad windows refused before any call."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, leftovers
from test_cluster_reservations import dense_reservation

from gcpgpu.cli import main

MT = "a3-ultragpu-8g"


@pytest.fixture
def cli(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args))
        assert result.exit_code == code, result.output
        return result

    return run


def _futures(gcp) -> list[dict]:
    return [fr for frs in gcp.compute.list_future_reservations(PROJECT).values() for fr in frs]


def test_calendar_reservation_advised_created_waited_for_and_consumed(gcp, cli, monkeypatch):
    from gcpgpu.cluster import reservations

    advised = json.loads(cli("--format", "json", "--region", "us-central1", "reservation", "advise",
                             "--machine-type", MT, "--count", "2", "--duration", "3d", "--start-after", "1d").stdout)
    zone = advised["zone"]
    assert zone and advised["start"] and advised["end"]
    created = cli("--zone", zone, "reservation", "create", "train", "--machine-type", MT, "--count", "2",
                  "--start", advised["start"], "--duration", "3d")
    assert "--wait-for-start" in created.output
    listed = json.loads(cli("--format", "json", "reservation", "list").stdout)
    assert [(f["name"], f["mode"], f["status"]) for f in listed["futureReservations"]] == \
        [("train", "CALENDAR", "PENDING_APPROVAL")]
    assert listed["reservations"] == []  # nothing delivered before the window

    # Each poll moves the emulator's clock 6 h on: the window (a day out) opens after a few polls.
    monkeypatch.setattr(reservations, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(reservations, "_sleep", lambda s: gcp.clock.advance(6 * 3600))
    up = cli("cluster", "up", "cal", "--machine-type", MT, "--nodes", "2", "--zone", zone,
             "--reservation", "train", "--wait-for-start", "--yes")
    assert "waiting for future reservation train" in up.output
    assert "APPROVED, window opens at" in up.output and "window open, reservation train delivered" in up.output
    for node in ("cal-0", "cal-1"):
        inst = gcp.compute.get(PROJECT, f"zones/{zone}/instances", node)
        assert inst["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
        assert inst["resourceStatus"]["reservationConsumptionInfo"]["consumedReservation"].endswith(
            "/reservations/train")
    described = json.loads(cli("--format", "json", "reservation", "describe", "train").stdout)
    assert (described["in_use"], described["free"], described["deployment"]) == (2, 0, "DENSE")
    assert sum(b["in_use"] for b in described["blocks"]) == 2


def test_describe_shows_blocks_and_sub_blocks_in_use_and_free(gcp, cli):
    dense_reservation(gcp, "sold", 20)
    cli("cluster", "up", "d", "--machine-type", MT, "--nodes", "3", "--zone", "us-central1-b",
        "--reservation", "sold", "--yes")
    out = cli("reservation", "describe", "sold").output
    assert "sold-block-0001-subblock-0001" in out and "HEALTHY" in out
    got = json.loads(cli("--format", "json", "reservation", "describe", "sold").stdout)
    assert [(s["count"], s["in_use"], s["free"]) for s in got["blocks"][0]["sub_blocks"]] == [(16, 3, 13), (4, 0, 4)]


def test_cancel_a_future_reservation(gcp, cli):
    cli("--zone", "us-central1-b", "reservation", "create", "later", "--machine-type", MT, "--count", "1",
        "--start", "2d", "--duration", "1d")
    cli("reservation", "cancel", "later")
    assert [f["status"]["procurementStatus"] for f in _futures(gcp)] == ["CANCELLED"]


@pytest.mark.parametrize("start,duration,says", [
    ("2000-01-01T00:00:00Z", "2d", "--start 2000-01-01T00:00:00Z is in the past"),
    ("1d", "2h", "--duration 2h is out of range: a calendar-mode reservation lasts 1 to 90 days"),
    ("1d", "91d", "--duration 91d is out of range"),
    ("60d", "2d", "is more than 8 weeks ahead"),
    ("soon", "2d", "--start 'soon' must be an RFC 3339 time"),
])
def test_a_bad_window_is_refused_in_one_line_and_nothing_is_created(gcp, cli, start, duration, says):
    out = cli("--zone", "us-central1-b", "reservation", "create", "bad", "--machine-type", MT, "--count", "1",
              "--start", start, "--duration", duration, code=2).output
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0], out
    assert _futures(gcp) == [] and leftovers(gcp) == {}


def test_nodes_on_a_calendar_reservation_end_with_its_window(gcp, cli, monkeypatch):
    from gcpgpu.cluster import reservations

    zone = "us-central1-b"
    cli("--zone", zone, "reservation", "create", "wk", "--machine-type", MT, "--count", "1",
        "--start", "1h", "--duration", "1d")
    monkeypatch.setattr(reservations, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(reservations, "_sleep", lambda s: gcp.clock.advance(1800))
    cli("cluster", "up", "w", "--machine-type", MT, "--nodes", "1", "--zone", zone, "--reservation", "wk",
        "--wait-for-start", "--yes")
    inst = gcp.compute.get(PROJECT, f"zones/{zone}/instances", "w-0")
    assert inst["resourceStatus"]["scheduling"]["terminationTimestamp"]  # the window's end, shown ahead
    gcp.clock.advance(86400 + 60)
    gcp.fault_clock.tick()  # ends w-0, unless the fault clock's own round came first
    ended = gcp.compute.list_operations(PROJECT, f"zones/{zone}", 'operationType="compute.instances.delete"')
    assert [(op["targetLink"].rsplit("/", 1)[-1], op["user"]) for op in ended] == [("w-0", "system")]
    gcp.clock.advance(120)
    assert "instances" not in leftovers(gcp)  # DELETE, the reservation-bound default


@pytest.mark.parametrize("duration", ["2h", "91d"])
def test_advise_refuses_a_duration_calendar_mode_does_not_allow(gcp, cli, duration):
    out = cli("--region", "us-central1", "reservation", "advise", "--machine-type", MT, "--count", "1",
              "--duration", duration, code=2).output
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"--duration {duration} is out of range" in errors[0], out
