"""What a Google error means for failover: the bulk stockout summary and its causes."""

from __future__ import annotations

from google.api_core import exceptions

from gcpgpu.gcp.errors import classify


def _op_error(code: int, *codes: str, message: str = "Requested minimum count of 4 VMs could not be created."):
    # A failed operation as api_core raises it: `errors` holds one entry per error code.
    return exceptions.from_http_status(code, message, errors=[{"code": c, "message": message} for c in codes])


def test_min_count_summary_alone_is_a_stockout_to_fail_over_on():
    f = classify(_op_error(400, "VM_MIN_COUNT_NOT_REACHED"), from_operation=True)
    assert f.kind == "stockout"


def test_min_count_summary_reads_past_to_its_cause():
    stockout = _op_error(503, "VM_MIN_COUNT_NOT_REACHED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    assert classify(stockout, from_operation=True).kind == "stockout"
    quota = _op_error(403, "VM_MIN_COUNT_NOT_REACHED", "QUOTA_EXCEEDED",
                      message="Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 16.0 in region us-central1.")
    f = classify(quota, from_operation=True)
    assert (f.kind, f.quota_metric, f.quota_region) == ("quota", "NVIDIA_H100_GPUS", "us-central1")
    bad = _op_error(400, "VM_MIN_COUNT_NOT_REACHED", "invalid")
    assert classify(bad, from_operation=True).kind == "permanent"


def test_other_capacity_codes_cluster_toolkit_treats_alike():
    for code in ("REGION_RESOURCE_POOL_EXHAUSTED", "RESOURCE_POOL_EXHAUSTED", "resourcePoolExhausted"):
        assert classify(_op_error(400, code)).kind == "stockout"


def test_a_cleanup_line_about_an_unreachable_endpoint_is_one_short_line():
    """A roll-back that cannot reach the API said so with urllib3's paragraph of pool details."""
    import requests

    from gcpgpu.cluster.teardown import one_line

    exc = requests.exceptions.ConnectionError(
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /compute/v1/projects/p\n"
        " (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish "
        "a new connection: [Errno 111] Connection refused'))")
    assert one_line(exc) == "cannot reach the API endpoint (ConnectionError)"


def test_retries_that_ran_out_are_told_by_their_last_error_not_the_clients_text():
    """At 90 % injected 503s a failed up ended with api_core's 'Timeout of 90.0s exceeded, last
    exception: 503 POST http://...' text."""
    from google.api_core import exceptions

    from gcpgpu.errors import describe_google_error

    last = exceptions.ServiceUnavailable(
        "POST http://127.0.0.1:1/compute/v1/projects/p/zones/z/instances/bulkInsert: Service Unavailable",
        errors=[{"reason": "backendError", "message": "Service Unavailable"}])
    said = describe_google_error(exceptions.RetryError("Timeout of 90.0s exceeded", last))
    assert said == "503 backendError: Service Unavailable (still failing after 90.0 s of retries)"
