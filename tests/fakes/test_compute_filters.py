"""The list `filter` grammar, including the forms gcloud sends when it pushes --filter to the server."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from gcpgpu.fakes.compute.filters import parse
from gcpgpu.fakes.core import ApiError

from .builders import PROJECT, ZONE, insert, vm

NET = "https://www.googleapis.com/compute/v1/projects/p/global/networks/default"
VM = {
    "name": "node-1",
    "status": "RUNNING",
    "labels": {"team": "ml", "rank": "1"},
    "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
    "networkInterfaces": [{"network": NET}, {"network": NET.replace("default", "data-net-1")}],
    "cpuCount": 8,
    "deletionProtection": False,
}


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("", True),
        ("name = node-1", True),
        ('name = "node-1"', True),
        ("name = node-*", True),
        ("name != node-1", False),
        ("-name = node-1", False),
        ("NOT name = node-2", True),
        ("labels.team = ml AND labels.rank = 1", True),
        ("labels.team = ml labels.rank = 2", False),  # adjacent terms are ANDed
        ("(labels.rank = 2) OR (labels.team = ml)", True),
        ("labels.team:*", True),
        ("labels.owner:*", False),
        ("labels:team", True),
        ("zone = us-central1-a", True),  # a link matches its last segment
        ("networkInterfaces.network = data-net-1", True),  # lists fan out
        ("cpuCount > 4", True),
        ("cpuCount <= 4", False),
        ("deletionProtection = false", True),
        # What gcloud sends for --filter=name~^node, -name=node-1, network:default, status=RUNNING.
        ('name eq ".*(^node).*"', True),
        ('name ne ".*\\bnode\\-1\\b.*"', False),
        ('networkInterfaces.network eq ".*\\bdefault\\b.*"', True),
        ("status eq RUNNING", True),
        ("(status eq RUNNING) (name eq 'node-[0-9]+')", True),
        ("name eq 'node'", False),  # eq must match the whole value
        ('name = "node\\"1"', False),
    ],
)
def test_filter_expressions(text: str, hit: bool) -> None:
    assert parse(text)(VM) is hit


@pytest.mark.parametrize("text", ["name =", "(name = a", "name = a)", "= a", "name eq '('", "AND"])
def test_malformed_filters_are_400(text: str) -> None:
    with pytest.raises(ApiError) as e:
        parse(text)(VM)
    assert e.value.code == 400


def test_gcloud_style_regex_filters_through_the_client(compute, instances) -> None:
    for name in ("vm-a", "vm-b", "other"):
        insert(instances, vm(name))
    fws = compute("FirewallsClient")
    got = [f.name for f in fws.list(request={"project": PROJECT, "filter": 'network eq ".*\\bdefault\\b.*"'})]
    assert len(got) == 4 and all(n.startswith("default-") for n in got)

    def names(flt: str) -> list[str]:
        return [i.name for i in instances.list(request={"project": PROJECT, "zone": ZONE, "filter": flt})]

    assert names('name eq ".*(^vm-).*"') == ["vm-a", "vm-b"]
    assert names('name ne ".*\\bvm\\-a\\b.*"') == ["other", "vm-b"]
    with pytest.raises(exceptions.BadRequest):
        names("name eq '(unclosed'")
