"""Cluster specs: every bad input is one line naming the field, exit 2, and zero API calls."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, make_plan, refused

from gcpgpu.cli import main
from gcpgpu.cluster.plan import plan
from gcpgpu.cluster.spec import ClusterSpec, duration
from gcpgpu.errors import UsageProblem

BAD_INPUTS = [
    # (arguments after `cluster up`, text the one-line error must contain)
    (["demo", "--machine-type", "a3-highgpu-9g", "--nodes", "2", "--region", "us-central1"], "--machine-type"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--gpus", "4", "--region", "us-central1"], "--gpus 4"),
    (["demo", "--machine-type", "a3-megagpu-8g", "--zone", "us-central1-c"], "--zone us-central1-c"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--zone", "mars-north1-a"], "--zone 'mars-north1-a'"),
    (["demo", "--machine-type", "a2-highgpu-8g", "--nodes", "1501", "--region", "us-central1"], "--nodes 1501"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--flex-start", "5m", "--region", "us-central1"], "--flex-start"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--flex-start", "9d", "--region", "us-central1"], "--flex-start"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--flex-start", "2h", "--create-reservation",
      "--region", "us-central1"], "--flex-start"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--spot", "--reservation", "res1", "--region", "us-central1"], "--spot"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--spot", "--flex-start", "2h", "--region", "us-central1"], "--spot"),
    (["Demo_1", "--machine-type", "a3-highgpu-8g", "--region", "us-central1"], "NAME 'Demo_1'"),
    (["a" * 41, "--machine-type", "a3-highgpu-8g", "--region", "us-central1"], "NAME"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--label", "Team=x", "--region", "us-central1"], "--label"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--label", "team=X Y", "--region", "us-central1"], "--label"),
    (["demo", "--machine-type", "a3-highgpu-8g"], "--region is missing"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--region", "us-central1", "--zones", "us-east4-a"], "--zones"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--reservation", "r", "--create-reservation",
      "--region", "us-central1"], "--reservation"),
    (["demo", "--machine-type", "a3-ultragpu-8g", "--region", "us-west1"], "--region us-west1"),
    (["demo", "--nodes", "2", "--region", "us-central1"], "--machine-type is missing"),
    (["demo", "--machine-type", "a3-highgpu-8g", "--nodes", "0", "--region", "us-central1"], "--nodes 0"),
]


@pytest.mark.parametrize(("args", "needle"), BAD_INPUTS, ids=[" ".join(a[1:4]) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_makes_no_api_call(gcp, monkeypatch, args, needle):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    assert needle in refused(gcp, "cluster", "up", *args, "--yes")


def test_flag_overrides_spec_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: big\nmachine-type: a2-highgpu-8g\nnodes: 8\nregion: us-central1\nlabels: {team: ml}\n")
    spec = ClusterSpec.from_sources(str(f), {"nodes": 2}).validate()
    assert (spec.name, spec.machine_type, spec.nodes, spec.labels) == ("big", "a2-highgpu-8g", 2, {"team": "ml"})


def test_unknown_spec_file_field_names_the_field(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: big\nmachine_typ: a2-highgpu-8g\n")
    with pytest.raises(UsageProblem, match="unknown field 'machine_typ'"):
        ClusterSpec.from_sources(str(f), {})


def test_defaults_fill_region_zones_and_placement():
    spec = ClusterSpec(name="c", machine_type="a3-megagpu-8g", nodes=4).validate(default_region="us-central1")
    assert spec.zones == ["us-central1-a", "us-central1-b"]  # the catalog's zones offering it, in order
    assert spec.placement == "compact"
    one = ClusterSpec(name="c", machine_type="a3-megagpu-8g", nodes=1).validate(default_zone="us-east4-b")
    assert (one.region, one.zones, one.placement) == ("us-east4", ["us-east4-b"], "none")
    flex = ClusterSpec(name="c", machine_type="a3-highgpu-8g", nodes=4, provisioning="flex-start",
                       max_run_duration=7200).validate(default_region="us-central1")
    # Compact placement is allowed with flex-start VMs (AI Hypercomputer guide; gcp-facts section 10).
    assert (flex.placement, flex.flex_wait) == ("compact", 3600)


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("2h", 7200), ("1d", 86400), ("600", 600), ("30s", 30)])
def test_parse_duration(text, seconds):
    assert duration("max_run_duration", text, "--flex-start") == seconds


def test_a2_plan_has_no_gpu_networks():
    p = make_plan(machine_type="a2-highgpu-8g")
    assert p.networks == [] and p.subnets == []
    assert [f["name"] for f in p.firewalls] == ["c-internal"]
    assert len(p.instance_properties["networkInterfaces"]) == 1
    assert p.policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}  # no vmCount: the cluster can grow


@pytest.mark.parametrize(("machine_type", "nics"), [("a3-highgpu-8g", 4), ("a3-edgegpu-8g", 4), ("a3-megagpu-8g", 8)])
def test_a3_plan_wires_every_gpu_nic(machine_type, nics):
    zone = {"a3-edgegpu-8g": "us-central1-c"}.get(machine_type)
    spec = ClusterSpec(name="c", machine_type=machine_type, nodes=2, zones=[zone] if zone else [])
    p = plan(spec.validate(default_region="us-central1"), PROJECT)
    assert len(p.networks) == nics and all(n["mtu"] == 8244 for n in p.networks)
    assert len(p.subnets) == nics
    ifaces = p.instance_properties["networkInterfaces"]
    assert len(ifaces) == nics + 1 and all(i["nicType"] == "GVNIC" for i in ifaces)
    cidrs = {s["ipCidrRange"] for s in p.subnets}
    for fw in p.firewalls:
        # Internal only: the cluster's own subnets or its own network tag, never the world.
        assert "0.0.0.0/0" not in fw.get("sourceRanges", [])
        assert set(fw.get("sourceRanges", [])) <= cidrs
    assert "accessConfigs" not in ifaces[0]  # no external IP unless asked


def test_scheduling_per_provisioning_model():
    std = make_plan(machine_type="a3-highgpu-8g").instance_properties
    assert std["scheduling"] == {"onHostMaintenance": "TERMINATE", "provisioningModel": "STANDARD",
                                 "automaticRestart": False}
    spot = make_plan(machine_type="a3-highgpu-8g", provisioning="spot").instance_properties
    assert spot["scheduling"]["provisioningModel"] == "SPOT"
    assert spot["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    flex = make_plan(machine_type="a3-highgpu-8g", provisioning="flex-start", max_run_duration=3600).instance_properties
    assert flex["scheduling"]["maxRunDuration"] == {"seconds": "3600"}
    assert flex["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert flex["resourcePolicies"] == ["c-placement"]


def test_created_reservation_carries_the_placement_policy_and_is_consumed():
    p = make_plan(machine_type="a3-highgpu-8g", create_reservation=True)
    assert p.reservation["specificReservation"]["count"] == "2"
    assert p.reservation["resourcePolicies"]["policy"].endswith("/resourcePolicies/c-placement")
    assert p.instance_properties["reservationAffinity"]["values"] == ["c-res"]


def test_cost_comes_from_dated_catalog_prices():
    # Outside a command nothing reads the Billing Catalog: the bundled table's whole-VM figures (tests/test_pricing.py
    # has the catalog's, per region).
    assert make_plan(machine_type="a3-highgpu-8g").cost_per_hour == round(2 * 88.49, 2)
    assert make_plan(machine_type="a3-highgpu-8g", provisioning="spot").cost_per_hour == round(2 * 50.6095, 2)
    assert make_plan(machine_type="a3-megagpu-8g").cost_per_hour == round(2 * 8 * 11.6172, 2)  # dated, sourced
    assert make_plan(machine_type="a4-highgpu-8g", region="us-east5").cost_per_hour == round(2 * 8 * 16.11, 2)
    assert make_plan(machine_type="a4-highgpu-8g", region="us-east5", provisioning="flex-start",
                     max_run_duration=7200).cost_per_hour is None  # the table has no flex-start price: unknown, not 0


def test_max_run_duration_caps_standard_and_spot_nodes_on_compute_itself():
    """--max-run-duration puts Compute Engine's own scheduling.maxRunDuration and
    instanceTerminationAction on every node (field names and enums as the Compute v1 discovery
    document has them), default STOP, so the cap holds with no agent left to enforce it."""
    std = make_plan(machine_type="a3-highgpu-8g", max_run_duration=86400)
    sched = std.instance_properties["scheduling"]
    assert (sched["provisioningModel"], sched["maxRunDuration"], sched["instanceTerminationAction"]) == (
        "STANDARD", {"seconds": "86400"}, "STOP")
    assert std.to_dict()["maxRunDuration"] == {"seconds": 86400, "instanceTerminationAction": "STOP"}
    spot = make_plan(machine_type="a3-highgpu-8g", provisioning="spot", max_run_duration=3600,
                     termination_action="delete").instance_properties["scheduling"]
    assert (spot["maxRunDuration"], spot["instanceTerminationAction"]) == ({"seconds": "3600"}, "DELETE")
    flex = make_plan(machine_type="a3-highgpu-8g", provisioning="flex-start", max_run_duration=3600,
                     termination_action="stop").instance_properties["scheduling"]
    assert (flex["maxRunDuration"], flex["instanceTerminationAction"]) == ({"seconds": "3600"}, "STOP")
    plain = make_plan(machine_type="a3-highgpu-8g")
    assert "maxRunDuration" not in plain.instance_properties["scheduling"]
    assert plain.to_dict()["maxRunDuration"] is None


@pytest.mark.parametrize(("flags", "expect"), [
    (["--max-run-duration", "10s"], "--max-run-duration 10s is out of range"),
    (["--max-run-duration", "121d"], "between 30s and 120d"),
    (["--max-run-duration", "soon"], "--max-run-duration 'soon' is not a duration"),
    (["--termination-action", "delete"], "--termination-action needs --max-run-duration"),
    (["--max-run-duration", "1h", "--termination-action", "suspend"], "--termination-action 'suspend' must be"),
    (["--flex-start", "2h", "--max-run-duration", "1h"], "--max-run-duration and --flex-start"),
    (["--flex-start", "8d"], "between 10m and 7d for flex-start"),
])
def test_bad_run_durations_are_one_line_naming_the_flag(flags, expect):
    result = CliRunner().invoke(main, ["--project", PROJECT, "cluster", "plan", "c", "--machine-type",
                                       "a3-highgpu-8g", "--zone", "us-central1-a", *flags])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], result.output


def test_spec_file_takes_max_run_duration_and_termination_action(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: c\nmachine_type: a3-highgpu-8g\nmax_run_duration: 12h\ntermination_action: DELETE\n")
    spec = ClusterSpec.from_sources(str(f), {}).validate(default_region="us-central1")
    assert (spec.max_run_duration, spec.termination_action) == (43200, "delete")


def test_startup_script_quotes_the_cluster_name():
    p = make_plan(machine_type="a2-highgpu-1g")
    script = next(i["value"] for i in p.instance_properties["metadata"]["items"] if i["key"] == "startup-script")
    assert "CLUSTER=c\n" in script and "NNODES=2" in script


def test_plan_command_prints_resources_and_cost_without_api_calls(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    result = CliRunner().invoke(main, ["cluster", "plan", "demo", "--machine-type", "a3-highgpu-8g", "--nodes", "2",
                                       "--region", "us-central1"])
    assert result.exit_code == 0, result.output
    # 2 whole a3-highgpu-8g VMs; a plan reads no price list either: the bundled table, as it says
    assert "demo-gpunet-4" in result.output and "$176.98/hour" in result.output
    assert "bundled table (offline fallback)" in result.output and "'gcpgpu catalog' reads it" in result.output
    assert len(gcp.requests) == 0
    as_json = CliRunner().invoke(main, ["--format", "json", "cluster", "up", "demo", "--machine-type", "a2-highgpu-1g",
                                        "--region", "us-central1", "--dry-run"])
    assert '"bulkInsert"' in as_json.output and len(gcp.requests) == 0


def test_plan_json_carries_the_run_cap_without_api_calls(gcp):
    """`cluster plan --max-run-duration 24h --format json`: the cap in the plan's summary and in the very
    scheduling fields the bulkInsert sends (as the discovery document spells them), no request made."""
    result = CliRunner().invoke(main, ["--project", PROJECT, "--format", "json", "cluster", "plan", "demo",
                                       "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a",
                                       "--max-run-duration", "24h"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.stdout)
    assert planned["maxRunDuration"] == {"seconds": 86400, "instanceTerminationAction": "STOP"}
    sched = planned["bulkInsert"]["instanceProperties"]["scheduling"]
    assert (sched["maxRunDuration"], sched["instanceTerminationAction"]) == ({"seconds": "86400"}, "STOP")
    assert len(gcp.requests) == 0


def test_plan_table_lists_sources_as_notes_within_120_columns(gcp, monkeypatch):
    from gcpgpu import catalog

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    argv = ["cluster", "plan", "c", "--machine-type", "a3-megagpu-8g", "--nodes", "2", "--region", "us-central1"]
    table = CliRunner().invoke(main, argv)  # CliRunner's stdout is not a terminal, as with `| cat`
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120
    rows, notes = lines[:lines.index("Sources:")], " ".join(lines[lines.index("Sources:") + 1:])
    assert not any("source:" in line for line in rows) and any("[1]" in line for line in rows)
    # Every citation survives whole in the notes (folded lines joined back), the TCPXO one with its parentheses.
    flat = " ".join(notes.split())
    for source in (catalog.node_setup(catalog.get_machine_type("a3-megagpu-8g")).source, catalog.gpudirect_host("tcpxo").source):
        assert " ".join(source.split()) in flat, source
    # --format json prints the plan's API bodies in full, untouched by the table's notes.
    as_json = CliRunner().invoke(main, ["--format", "json", *argv])
    body = json.loads(as_json.stdout)
    assert body["bulkInsert"]["count"] == 2 and "Sources:" not in as_json.stdout


def test_footnote_sources_numbers_repeated_sources_once_and_keeps_nested_parentheses():
    from gcpgpu.output import footnote_sources

    rows, notes = footnote_sources([{"details": "disk (source: CT a (b, c))"},
                                    {"details": "agent (x; source: CT a (b, c)) (unverified)"},
                                    {"details": "plain"}, {"details": None}])
    assert [r["details"] for r in rows] == ["disk [1]", "agent (x [1]) (unverified)", "plain", None]
    assert notes == "Sources:\n[1] CT a (b, c)"
    assert footnote_sources([{"details": "plain"}]) == ([{"details": "plain"}], None)


@pytest.mark.parametrize("image", [
    "projects/debian-cloud/global/images/family/debian-12",
    "https://www.googleapis.com/compute/v1/projects/ubuntu-os-cloud/global/images/ubuntu-2204-jammy-v20240927",
    "global/images/my-tcpx-image", "projects/example.com:ml-proj/global/images/family/tcpx"])
def test_boot_images_compute_takes_are_accepted(image):
    props = make_plan(zones=["us-central1-a"], image=image).instance_properties
    assert props["disks"][0]["initializeParams"]["sourceImage"] == image


def test_network_subnetwork_account_and_scopes_of_the_documented_shapes_are_accepted():
    scopes = ["https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/devstorage.read_only"]
    props = make_plan(zones=["us-central1-a"], network="sysnet", subnetwork="sysnet-usc1", scopes=scopes,
                      service_account="nodes@test-proj.iam.gserviceaccount.com").instance_properties
    assert props["serviceAccounts"] == [{"email": "nodes@test-proj.iam.gserviceaccount.com", "scopes": scopes}]
    nic = props["networkInterfaces"][0]
    assert nic["network"] == f"projects/{PROJECT}/global/networks/sysnet"
    assert nic["subnetwork"] == f"projects/{PROJECT}/regions/us-central1/subnetworks/sysnet-usc1"
