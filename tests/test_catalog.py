"""The machine catalog: every machine type resolves, with the facts of gcp-facts.md section 1."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from click.testing import CliRunner

from gcpgpu import catalog
from gcpgpu.catalog import get_machine_type, gpu_types, machine_types
from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem

# shared/reference/gcp-facts.md section 1: machine type -> Vertex AcceleratorType (None: not on Vertex).
VERTEX = {
    **{f"a2-highgpu-{n}g": "NVIDIA_TESLA_A100" for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": "NVIDIA_TESLA_A100",
    **{f"a2-ultragpu-{n}g": "NVIDIA_A100_80GB" for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": "NVIDIA_H100_80GB" for n in (1, 2, 4, 8)},
    "a3-edgegpu-8g": None,
    "a3-megagpu-8g": "NVIDIA_H100_MEGA_80GB",
    "a3-ultragpu-8g": "NVIDIA_H200_141GB",
    "a4-highgpu-8g": "NVIDIA_B200",
    **{f"g2-standard-{n}": "NVIDIA_L4" for n in (12, 24, 48, 96)},
}

# Same table: machine type -> (Compute accelerator type, GPUs, GB per GPU, GPU NICs, GPUDirect).
HARDWARE = {
    "a2-highgpu-1g": ("nvidia-tesla-a100", 1, 40, 0, "none"),
    "a2-megagpu-16g": ("nvidia-tesla-a100", 16, 40, 0, "none"),
    "a2-ultragpu-8g": ("nvidia-a100-80gb", 8, 80, 0, "none"),
    "a3-highgpu-1g": ("nvidia-h100-80gb", 1, 80, 0, "none"),
    "a3-highgpu-2g": ("nvidia-h100-80gb", 2, 80, 0, "none"),
    "a3-highgpu-4g": ("nvidia-h100-80gb", 4, 80, 0, "none"),
    "a3-highgpu-8g": ("nvidia-h100-80gb", 8, 80, 4, "tcpx"),
    "a3-edgegpu-8g": ("nvidia-h100-80gb", 8, 80, 4, "tcpx"),
    "a3-megagpu-8g": ("nvidia-h100-mega-80gb", 8, 80, 8, "tcpxo"),
    "a3-ultragpu-8g": ("nvidia-h200-141gb", 8, 141, 8, "rdma"),
    "a4-highgpu-8g": ("nvidia-b200", 8, 180, 8, "rdma"),
    "g2-standard-96": ("nvidia-l4", 8, 24, 0, "none"),
}


def test_catalog_covers_the_reference_table():
    assert set(machine_types()) == set(VERTEX)


@pytest.mark.parametrize("name", sorted(VERTEX))
def test_every_machine_type_resolves(name):
    machine = get_machine_type(name)
    assert machine.name == name
    assert machine.gpu is gpu_types()[machine.accelerator_type]
    assert machine.gpu_count >= 1 and machine.vcpus >= 1 and machine.memory_mb >= 1024
    assert machine.vertex_accelerator == VERTEX[name]
    assert machine.gpudirect in {"none", "tcpx", "tcpxo", "rdma"}
    assert machine.compact_max_vms >= 1


@pytest.mark.parametrize(("name", "expected"), sorted(HARDWARE.items()))
def test_hardware_matches_the_reference(name, expected):
    machine = get_machine_type(name)
    accelerator, count, gb_per_gpu, nics, gpudirect = expected
    got = (
        machine.accelerator_type,
        machine.gpu_count,
        machine.gpu.memory_gib,
        machine.gpu_nics,
        machine.gpudirect,
    )
    assert got == (accelerator, count, gb_per_gpu, nics, gpudirect)


def test_small_a3_overrides_its_family():
    # The a3-high family has 4 GPU NICs with TCPX; only the 8-GPU shape gets them.
    assert get_machine_type("a3-highgpu-4g").gpu_nic_mtu is None
    assert get_machine_type("a3-highgpu-8g").gpu_nic_mtu == 8244


def test_rdma_families_need_two_gvnic_networks():
    for name in ("a3-ultragpu-8g", "a4-highgpu-8g"):
        machine = get_machine_type(name)
        assert (machine.nic_type, machine.gvnic_networks, machine.gvnic_mtu) == ("MRDMA", 2, 8896)


def test_prices_are_per_node():
    # The offline fallback (gcpgpu/pricing reads the Billing Catalog): a3-highgpu-8g is the whole VM's list
    # price, not eight bare GPUs at the seed's $6.98 ($55.84).
    a3 = get_machine_type("a3-highgpu-8g")
    assert (a3.price_per_hour, a3.spot_price_per_hour) == (88.49, 50.6095)
    assert "whole VM" in catalog.price_source(a3) and catalog.price_as_of(a3) == "2026-07-30"
    assert get_machine_type("a2-highgpu-1g").price_per_hour == 3.52
    assert catalog.prices_as_of() == "2025-01"


# The families that had no price: per node, per model, each with a source and an as-of date.
NEW_PRICES = {
    "a2-ultragpu-1g": (5.0688, 2.0275), "a2-ultragpu-8g": (40.5504, 16.22),
    "a3-megagpu-8g": (92.9376, 37.392), "a3-ultragpu-8g": (83.492, 50.0856),
    "g2-standard-12": (1.0004, 0.3936), "g2-standard-48": (4.0016, 1.5744), "g2-standard-96": (8.0032, 3.1488),
}


@pytest.mark.parametrize(("name", "prices"), sorted(NEW_PRICES.items()))
def test_a2_ultra_a3_mega_a3_ultra_and_g2_have_dated_sourced_prices(name, prices):
    machine = get_machine_type(name)
    assert (machine.price_per_hour, machine.spot_price_per_hour) == prices
    assert machine.gpu.price_source and machine.gpu.price_as_of[:4] in ("2025", "2026")
    assert machine.gpu.price_verified is False  # nobody here read Google's own page: said so, in the data
    assert catalog.price_note(machine) == f"catalog prices of {machine.gpu.price_as_of}, unverified"


def test_a4_is_priced_as_eight_whole_vm_slices():
    a4 = get_machine_type("a4-highgpu-8g")
    assert (a4.price_per_hour, a4.spot_price_per_hour) == (8 * 16.11, 8 * 4.9542)
    assert "1 gpu slice" in catalog.price_source(a4) and "unverified" in catalog.price_source(a4)


def test_verified_figures_from_a_real_api():
    a2 = get_machine_type("a2-highgpu-1g")
    assert (a2.vcpus, a2.memory_mb, a2.verified) == (12, 87040, True)
    assert get_machine_type("a3-highgpu-8g").vcpus == 208


def test_unknown_machine_type_suggests_a_close_one():
    with pytest.raises(UsageProblem) as caught:
        get_machine_type("a3-highgpu-9g")
    assert caught.value.format_message() == (
        "--machine-type 'a3-highgpu-9g' is not a known GPU machine type; did you mean a3-highgpu-8g? "
        "(see 'gcpgpu catalog')"
    )
    assert caught.value.exit_code == 2


def test_unknown_machine_type_without_a_close_one():
    with pytest.raises(UsageProblem) as caught:
        get_machine_type("e2-micro")
    assert "did you mean" not in caught.value.format_message()
    assert "(see 'gcpgpu catalog')" in caught.value.format_message()


def test_api_urls_resolve_and_capitals_get_the_lowercase_name():
    url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/machineTypes/a3-highgpu-8g"
    assert get_machine_type(url).name == "a3-highgpu-8g"
    assert get_machine_type(" a2-highgpu-1g ").name == "a2-highgpu-1g"
    # Refused as a cluster name with capitals is (issue 24 item 11), never folded silently.
    with pytest.raises(UsageProblem) as caught:
        get_machine_type("A2-HighGPU-1G")
    assert "did you mean 'a2-highgpu-1g'?" in caught.value.format_message()


def test_catalog_is_read_only_and_cached():
    machine = get_machine_type("g2-standard-12")
    with pytest.raises(dataclasses.FrozenInstanceError):
        machine.gpu_count = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        machine_types()["x"] = machine  # type: ignore[index]
    assert machine_types() is machine_types()


def test_uses_the_c_loader_when_available():
    if getattr(yaml, "CSafeLoader", None) is not None:
        assert catalog._Loader is yaml.CSafeLoader


def test_misspelt_key_in_the_data_is_refused(monkeypatch):
    raw = yaml.safe_load((catalog.files("gcpgpu") / "data" / "machines.yaml").read_text(encoding="utf-8"))
    raw["machine_types"]["a3-highgpu-1g"]["gpu_nic"] = 0  # meant gpu_nics
    monkeypatch.setattr(catalog, "_raw", lambda: raw)
    catalog.machine_types.cache_clear()
    catalog.gpu_types.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"a3-highgpu-1g.*gpu_nic"):
            machine_types()
    finally:
        monkeypatch.undo()
        catalog.machine_types.cache_clear()
        catalog.gpu_types.cache_clear()


# --- gcpgpu catalog ----------------------------------------------------------------------------


def test_catalog_command_lists_every_machine_type():
    result = CliRunner().invoke(main, ["catalog"])
    assert result.exit_code == 0, result.output
    for name in VERTEX:
        assert name in result.stdout
    assert "NVIDIA_H100_MEGA_80GB" in result.stdout
    assert "bundled table (offline fallback)" in result.stderr  # where prices come from is a note, not a row


def test_catalog_json_is_complete():
    result = CliRunner().invoke(main, ["--format", "json", "catalog"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [row["name"] for row in rows] == list(machine_types())
    by_name = {row["name"]: row for row in rows}
    assert by_name["a3-edgegpu-8g"]["vertex_accelerator"] is None
    assert by_name["a3-highgpu-8g"]["gpu"]["memory_gib"] == 80


def test_catalog_show_yaml():
    result = CliRunner().invoke(main, ["--format", "yaml", "catalog", "show", "a4-highgpu-8g"])
    assert result.exit_code == 0, result.output
    record = yaml.safe_load(result.stdout)
    assert (record["name"], record["gpu_nics"], record["vertex_accelerator"]) == (
        "a4-highgpu-8g",
        8,
        "NVIDIA_B200",
    )


def test_catalog_show_table():
    result = CliRunner().invoke(main, ["catalog", "show", "a3-megagpu-8g"])
    assert result.exit_code == 0, result.output
    assert "tcpxo" in result.stdout and "NVIDIA_H100_MEGA_GPUS" in result.stdout


def test_catalog_show_unknown_exits_2_in_one_line():
    result = CliRunner().invoke(main, ["catalog", "show", "a3-highgpu-9g"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "Error: MACHINE_TYPE 'a3-highgpu-9g' is not a known GPU machine type; did you mean a3-highgpu-8g? "
        "(see 'gcpgpu catalog')"
    ]
