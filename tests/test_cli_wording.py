"""Issue 51: wording a newcomer meets: counts in plain English, and a STATUS cell that does not widen `cluster list`.

`cluster down`'s summary said "1 placement polic(ies)", the trainer "1 ranks", and a 150-character STATUS cell
widened `cluster list` to 270 columns.
"""

from __future__ import annotations

import json

from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main
from gcpgpu.cluster.kinds import NODES, POLICIES

PROJECT = "test-proj"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, "--region", "us-central1", *argv])


def test_counts_read_as_english():
    assert [POLICIES.counted(n) for n in (0, 1, 2)] == ["0 placement policies", "1 placement policy",
                                                          "2 placement policies"]
    assert NODES.counted(1) == "1 node" and NODES.counted(3) == "3 nodes"


def test_a_long_status_wraps_in_its_column_and_keeps_every_word(gcp):
    assert cli("cluster", "up", "c", "--machine-type", "a3-megagpu-8g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    for name in ("c-0", "c-1"):  # an `up` interrupted after the networks: its status lists them all
        gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", name)
    wait_for(lambda: not gcp.compute.list(PROJECT, "zones/us-central1-a/instances"), what="the nodes deleted")
    (row,) = json.loads(cli("--format", "json", "cluster", "list").stdout)
    assert len(row["status"]) > 100, row["status"]
    table = cli("cluster", "list")
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.stdout.splitlines()) < 200, table.stdout
    assert all(word in table.stdout for word in row["status"].split()), table.stdout


def test_command_help_says_it_runs_behind_the_entrypoint_and_prices_name_no_missing_file():
    """Issue 51: --command's help said "instead of the image's entrypoint" (it runs behind it, which applies the
    NCCL profile and the user's code), and the catalog's price_source named a file not in the repository."""
    from pathlib import Path

    from gcpgpu.catalog import machine_types

    text = " ".join(CliRunner().invoke(main, ["job", "submit", "--help"]).output.split())
    assert "instead of the image's entrypoint" not in text
    assert "instead of the bundled trainer, e.g. 'python train.py', behind the image's entrypoint" in text
    root = Path(__file__).resolve().parents[1]
    for machine in machine_types().values():
        if machine.gpu is None:
            continue
        for path in [w for w in machine.gpu.price_source.replace("(", " ").split() if w.endswith((".md", ".yaml"))]:
            assert (root / path).exists(), (machine.name, machine.gpu.price_source)
