"""gcp/compute.py: Compute clients and messages, each service imported alone, the package's names kept."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gcpgpu.gcp.compute import client_class, compute_types


def test_every_client_the_package_exports_is_found_by_its_name():
    from google.cloud import compute_v1

    names = [n for n in compute_v1.__all__ if n.endswith("Client")]
    assert len(names) > 100
    assert {n: client_class(n) for n in names} == {n: getattr(compute_v1, n) for n in names}
    assert compute_types().Metadata is compute_v1.Metadata


def test_a_name_that_is_no_client_class_is_refused():
    with pytest.raises(ValueError, match="not a compute_v1 client class name: 'Instances'"):
        client_class("Instances")


def test_the_whole_package_is_still_there_for_code_that_reads_it():
    # A fresh interpreter: gcpgpu registers the package lightly, then code (a test, a user's script) reads
    # compute_v1.SomeClient as usual, which runs the package's own __init__ at that moment.
    code = """
import sys
from gcpgpu.gcp.compute import client_class
instances = client_class("InstancesClient")
print("disks" in " ".join(sys.modules))
from google.cloud import compute_v1
print(compute_v1.InstancesClient is instances, compute_v1.DisksClient.__name__, compute_v1.Disk.__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "DisksClient", "Disk"]
