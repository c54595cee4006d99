"""Partial responses: `fields` (query) or X-Goog-FieldMask (header) trims what the emulator answers,
as every Google REST API does; gcpgpu's node lists ask for it so 1,000 VMs parse in a fraction."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from gcpgpu.fakes.partial import FieldMaskError, parse, select

from .builders import PROJECT, ZONE, insert, vm


def test_selection_syntax_paths_groups_and_map_wildcards():
    body = {"kind": "x", "items": {"zones/a": {"instances": [{"name": "a", "status": "RUNNING", "metadata": {"k": 1},
                                                              "resourceStatus": {"physicalHostTopology": {"block": "b"},
                                                                                 "physicalHost": "/b"}}]},
                                   "zones/b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}},
            "nextPageToken": "t"}
    got = select(body, parse("items/*/instances(name,resourceStatus/physicalHostTopology),nextPageToken"))
    assert got == {"items": {"zones/a": {"instances": [{"name": "a", "resourceStatus": {
        "physicalHostTopology": {"block": "b"}}}]}, "zones/b": {}}, "nextPageToken": "t"}
    with pytest.raises(FieldMaskError):
        parse("items(name")


def test_the_compute_client_gets_only_the_fields_its_header_asks_for(gcp, instances):
    insert(instances, vm("v1", labels={"team": "a"}))
    pager = instances.aggregated_list(request={"project": PROJECT},
                                      metadata=[("x-goog-fieldmask", "items/*/instances(name,labels),nextPageToken")])
    [inst] = [i for _scope, scoped in pager for i in scoped.instances]
    assert inst.name == "v1" and dict(inst.labels) == {"team": "a"}
    assert inst.status == "" and not inst.disks and not inst.network_interfaces  # not sent, so empty


def test_fields_query_parameter_and_a_malformed_mask_is_a_400(gcp, instances):
    insert(instances, vm("v2"))
    url = f"http://{gcp.address}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/v2"
    with urllib.request.urlopen(f"{url}?fields=name,status", timeout=10) as r:  # noqa: S310 - loopback
        assert json.loads(r.read()) == {"name": "v2", "status": "RUNNING"}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{url}?fields=name(", timeout=10)  # noqa: S310
    assert e.value.code == 400
