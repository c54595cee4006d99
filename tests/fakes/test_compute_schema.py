"""The schema check reads Compute's discovery document right: the names it reports are the ones
Google's own compute_v1 library (generated from the same API's protos) gives those fields."""

from __future__ import annotations

import pytest
from google.cloud import compute_v1

from gcpgpu.fakes.compute import schema

# (discovery resource, method) the emulator takes a body for -> compute_v1's request message.
SERVED = {
    ("instances", "insert"): compute_v1.InsertInstanceRequest,
    ("instances", "bulkInsert"): compute_v1.BulkInsertInstanceRequest,
    ("instances", "setLabels"): compute_v1.SetLabelsInstanceRequest,
    ("instances", "setMetadata"): compute_v1.SetMetadataInstanceRequest,
    ("instanceTemplates", "insert"): compute_v1.InsertInstanceTemplateRequest,
    ("regionInstanceTemplates", "insert"): compute_v1.InsertRegionInstanceTemplateRequest,
    ("reservations", "insert"): compute_v1.InsertReservationRequest,
    ("subnetworks", "insert"): compute_v1.InsertSubnetworkRequest,
    ("resourcePolicies", "insert"): compute_v1.InsertResourcePolicyRequest,
    ("networks", "insert"): compute_v1.InsertNetworkRequest,
    ("firewalls", "insert"): compute_v1.InsertFirewallRequest,
}


@pytest.mark.parametrize(("resource", "method"), sorted(SERVED))
def test_error_paths_start_at_the_request_messages_body_field(resource, method):
    ref = schema.request_type(resource, method)
    assert ref is not None
    assert schema.body_field(ref) in SERVED[(resource, method)].meta.fields


@pytest.mark.parametrize("message", ["Instance", "InstanceProperties", "Scheduling", "NetworkInterface",
                                     "AttachedDisk", "BulkInsertInstanceResource", "Reservation"])
def test_field_paths_use_compute_v1s_snake_case_names(message):
    # Every field compute_v1 has is some discovery field's snake_case name (the document may be newer
    # than the library and hold more). compute_v1 adds "_" to names Python reserves (type_).
    snaked = {schema.snake(name) for name in schema.discovery()["schemas"][message]["properties"]}
    for field in getattr(compute_v1, message).meta.fields:
        assert field.rstrip("_") in snaked, field


def test_a_valid_body_passes_and_the_document_is_read_once():
    schema.check_body("instances", "insert", {"name": "ok", "scheduling": {"automaticRestart": False},
                                              "labels": {"a": "b"}, "disks": [{"diskSizeGb": "10"}]})
    assert schema.discovery() is schema.discovery()
