"""NCCL profiles per GPUDirect flavour, interface names per platform, overrides, and the tuner config."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu import nccl
from gcpgpu.catalog import get_machine_type, machine_types
from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem

# What Google publishes for each flavour (shared/reference/gcp-facts.md section 8), as it must appear.
PUBLISHED = {
    "tcpx": {
        "NCCL_NET": "GPUDirectTCPX_v7",
        "NCCL_CROSS_NIC": "0",
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "Simple",
        "NCCL_NSOCKS_PERTHREAD": "4",
        "NCCL_SOCKET_NTHREADS": "1",
        "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
        "NCCL_P2P_NET_CHUNKSIZE": "524288",
        "NCCL_P2P_PCI_CHUNKSIZE": "524288",
        "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
        "NCCL_BUFFSIZE": "4194304",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_P2P_PXN_LEVEL": "0",
        "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx",
        "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
    },
    "tcpxo": {
        "NCCL_CROSS_NIC": "0",
        "NCCL_PROTO": "Simple,LL128",
        "NCCL_MIN_NCHANNELS": "4",
        "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
        "NCCL_TUNER_CONFIG_PATH": "/var/lib/tcpxo/lib64/a3plus_tuner_config.textproto",
        "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": "/var/lib/tcpxo/lib64/a3plus_guest_config.textproto",
        "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
        "NCCL_P2P_NET_CHUNKSIZE": "524288",
        "NCCL_P2P_PCI_CHUNKSIZE": "524288",
        "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
        "NCCL_FASTRAK_NUM_FLOWS": "2",
        "NCCL_FASTRAK_USE_SNAP": "1",
        "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
        "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
        "NCCL_BUFFSIZE": "8388608",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
        "NCCL_FASTRAK_USE_LLCM": "1",
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
        "NCCL_NVLS_ENABLE": "1",
        "NCCL_DEBUG": "WARN",
    },
    "rdma": {
        "NCCL_NET": "gIB",
        "LD_LIBRARY_PATH": "/usr/local/gib/lib64",
        "NCCL_CROSS_NIC": "0",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_P2P_NET_CHUNKSIZE": "131072",
        "NCCL_NVLS_CHUNKSIZE": "524288",
        "NCCL_IB_ADAPTIVE_ROUTING": "1",
        "NCCL_IB_QPS_PER_CONNECTION": "4",
        "NCCL_IB_TC": "52",
        "NCCL_IB_FIFO_TC": "84",
    },
    "none": {
        "NCCL_NSOCKS_PERTHREAD": "4",
        "NCCL_SOCKET_NTHREADS": "4",
        "NCCL_IB_DISABLE": "1",
    },
}


def env_of(machine_type: str, platform: str = "vm", **overrides: str) -> nccl.NcclEnv:
    return nccl.render_env(get_machine_type(machine_type), platform, overrides)


@pytest.mark.parametrize("machine", [m.name for m in machine_types().values()])
@pytest.mark.parametrize("platform", nccl.PLATFORMS)
def test_every_machine_renders_its_flavours_published_variables(machine: str, platform: str):
    result = env_of(machine, platform)
    flavor = get_machine_type(machine).gpudirect
    assert result.flavor == flavor
    for name, value in PUBLISHED[flavor].items():
        if name == "NCCL_ALGO" and platform != "vm":
            assert result.env[name] == "Ring,Tree"  # GKE's published TCPX value
        else:
            assert result.env[name] == value, (machine, platform, name)
    # Every template was filled; no value still names a placeholder.
    assert not [v for v in result.env.values() if "{" in v]


def test_tcpx_on_a_vm_names_the_a3_high_nics_and_binds_their_cores():
    env = env_of("a3-highgpu-8g").env
    assert env["NCCL_SOCKET_IFNAME"] == env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "enp0s12"
    assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "enp6s0,enp12s0,enp134s0,enp140s0"
    assert env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"].split(";")[0] == "enp6s0:8-21,112-125"
    assert env["NCCL_GPUDIRECTTCPX_RX_BINDINGS"].split(";")[3] == "enp140s0:74-87,178-191"
    assert env["LD_LIBRARY_PATH"] == "/usr/local/tcpx/lib64"


def test_tcpx_in_a_pod_uses_ethN_and_ring_tree():
    env = env_of("a3-highgpu-8g", "container").env
    assert env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "eth0"
    assert env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    assert env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"].startswith("eth1:8-21,112-125;eth2:")
    assert env["NCCL_ALGO"] == "Ring,Tree"


def test_tcpxo_names_eight_gpu_nics_per_platform():
    vm = env_of("a3-megagpu-8g").env
    assert vm["NCCL_FASTRAK_CTRL_DEV"] == vm["NCCL_SOCKET_IFNAME"] == "enp0s12"
    assert vm["NCCL_FASTRAK_IFNAME"] == "enp6s0,enp7s0,enp13s0,enp14s0,enp134s0,enp135s0,enp141s0,enp142s0"
    pod = env_of("a3-megagpu-8g", "vertex").env
    assert pod["NCCL_FASTRAK_IFNAME"] == ",".join(f"eth{i}" for i in range(1, 9))
    assert pod["NCCL_FASTRAK_CTRL_DEV"] == "eth0"


def test_rdma_uses_the_two_gvnics_and_a_per_machine_tuner_file():
    ultra = env_of("a3-ultragpu-8g").env
    assert ultra["NCCL_SOCKET_IFNAME"] == "enp0s19,enp192s20"
    assert "NCCL_IB_GID_INDEX" not in ultra
    a4 = env_of("a4-highgpu-8g", "container").env
    assert a4["NCCL_SOCKET_IFNAME"] == "eth0,eth1"
    assert a4["NCCL_IB_GID_INDEX"] == "3"
    assert a4["NCCL_TUNER_CONFIG_PATH"] == "/usr/local/gib/configs/tuner_config_a4.txtpb"


def test_socket_machines_let_nccl_pick_the_one_nic_on_a_vm():
    a2 = env_of("a2-highgpu-8g")
    assert a2.env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert a2.env["NCCL_P2P_LEVEL"] == "NVL"
    assert "NCCL_NET" not in a2.env and "LD_LIBRARY_PATH" not in a2.env
    assert "NCCL_P2P_LEVEL" not in env_of("g2-standard-48").env  # L4s have no NVLink
    assert env_of("a3-highgpu-4g").flavor == "none"  # fewer than 8 GPUs: no GPU NICs
    assert env_of("a2-highgpu-1g", "container").env["NCCL_SOCKET_IFNAME"] == "eth0"


@pytest.mark.parametrize("machine", [m.name for m in machine_types().values()])
def test_derived_gpu_nics_match_the_catalog(machine: str):
    mt = get_machine_type(machine)
    expected = mt.gpu_nics if mt.nic_type == "GVNIC" else 0
    for platform in nccl.PLATFORMS:
        names = nccl.interface_names(mt, platform)
        assert len(names.gpu) == expected
        assert len(set(names.host + names.gpu)) == len(names.host) + len(names.gpu)


def test_overrides_win_and_are_reported():
    result = env_of("a3-megagpu-8g", NCCL_DEBUG="INFO", NCCL_PROTO="Simple", NCCL_FASTRAK_NUM_FLOWS="4")
    assert result.env["NCCL_DEBUG"] == "INFO"
    assert result.env["NCCL_PROTO"] == "Simple"
    assert result.env["NCCL_FASTRAK_NUM_FLOWS"] == "4"
    assert set(result.overridden) == {"NCCL_DEBUG", "NCCL_PROTO", "NCCL_FASTRAK_NUM_FLOWS"}
    own = env_of("a3-highgpu-8g", LD_LIBRARY_PATH="/opt/mine")
    assert own.env["LD_LIBRARY_PATH"] == "/opt/mine" and "LD_LIBRARY_PATH" not in own.prepend


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("NCCL_ALGO", "Fastest", "not a comma list of Tree, Ring"),
        ("NCCL_PROTO", "LL256", "not a comma list of LL, LL128, Simple"),
        ("NCCL_DEBUG", "LOUD", "not one of VERSION, WARN, INFO, TRACE"),
        ("NCCL_BUFFSIZE", "-1", "not a whole number 1 or more"),
        ("NCCL_SOCKET_NTHREADS", "32", "from 1 to 16"),
        ("NCCL_MIN_NCHANNELS", "many", "from 1 to 64"),
        ("NCCL_DEBUG_SUBSYS", "INIT,EVERYTHING", "not a comma list"),
    ],
)
def test_bad_knob_values_are_refused_in_one_line(name: str, value: str, words: str):
    with pytest.raises(UsageProblem) as err:
        env_of("a2-highgpu-8g", **{name: value})
    assert words in err.value.format_message()
    assert "\n" not in err.value.format_message()


def test_knob_lists_accept_exclusion_and_any_case():
    assert env_of("a2-highgpu-8g", NCCL_ALGO="^tree", NCCL_PROTO="simple,ll128").env["NCCL_ALGO"] == "^tree"


def test_too_many_sockets_per_connection_is_refused():
    with pytest.raises(UsageProblem, match="at most 64"):
        env_of("a2-highgpu-8g", NCCL_NSOCKS_PERTHREAD="16", NCCL_SOCKET_NTHREADS="8")


def test_shell_output_quotes_values_and_prepends_library_path(tmp_path):
    import subprocess

    result = env_of("a3-highgpu-8g", NCCL_DEBUG_SUBSYS="INIT,NET")
    script = nccl.format_shell(result) + 'printf "%s\\n" "$LD_LIBRARY_PATH" "$NCCL_GPUDIRECTTCPX_TX_BINDINGS"\n'
    out = subprocess.run(
        ["bash", "-c", script], env={"LD_LIBRARY_PATH": "/usr/lib/x"}, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "/usr/local/tcpx/lib64:/usr/lib/x"
    assert out[1] == result.env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"]  # the ';' survived quoting


def test_host_check_names_what_is_missing(tmp_path):
    result = env_of("a3-highgpu-8g")
    check = nccl.check_host(result, tmp_path)
    text = " ".join(check.problems)
    assert "/usr/local/tcpx/lib64/libnccl-net.so" in text and "/run/tcpx" in text and "enp6s0" in text
    (tmp_path / "usr/local/tcpx/lib64").mkdir(parents=True)
    (tmp_path / "usr/local/tcpx/lib64/libnccl-net.so").touch()
    (tmp_path / "run/tcpx").mkdir(parents=True)
    for nic in ("enp0s12", "enp6s0", "enp12s0", "enp134s0", "enp140s0"):
        (tmp_path / "sys/class/net" / nic).mkdir(parents=True)
    assert nccl.check_host(result, tmp_path).problems == ()


# --- tuner config ----------------------------------------------------------------------------------------


def test_default_tuner_table_is_valid_and_covers_every_size():
    rules = nccl.tuner_rules()
    text = nccl.tuner_config()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == len(rules)
    assert lines[0] == "allreduce,0,65535,tree,ll,-1"
    for collective in {r.collective for r in rules}:
        group = sorted((r for r in rules if r.collective == collective), key=lambda r: r.min_bytes)
        assert group[0].min_bytes == 0 and group[-1].max_bytes == nccl.MAX_BYTES
        assert all(b.min_bytes == a.max_bytes + 1 for a, b in zip(group, group[1:], strict=False))
    for line in lines:
        assert len(line.split(",")) == 6


def rule(low, high, collective="allreduce", algorithm="ring", protocol="simple", **extra):
    return {"collective": collective, "from": low, "to": high, "algorithm": algorithm, "protocol": protocol, **extra}


def test_overlapping_ranges_are_refused():
    with pytest.raises(UsageProblem, match=r"allreduce ranges 0\.\.65535 and 32768\.\.max overlap"):
        nccl.tuner_rules([rule(0, "64KiB"), rule("32KiB", None)])


def test_gaps_are_refused():
    with pytest.raises(UsageProblem, match=r"leaves 65536\.\.131071 bytes uncovered"):
        nccl.tuner_rules([rule(0, "64KiB"), rule("128KiB", None)])
    with pytest.raises(UsageProblem, match=r"leaves 0\.\.1023 bytes uncovered"):
        nccl.tuner_rules([rule("1KiB", None)])
    with pytest.raises(UsageProblem, match="end its last range with to: max"):
        nccl.tuner_rules([rule(0, "1MiB")])


@pytest.mark.parametrize(
    ("row", "words"),
    [
        (rule(0, None, collective="alltoall"), "collective 'alltoall' is not one of"),
        (rule(0, None, algorithm="tree", collective="allgather"), "no tree algorithm for allgather"),
        (rule(0, None, protocol="ll256"), "protocol 'll256'"),
        (rule(0, None, channels=0), "channels 0"),
        (rule("1MiB", "1KiB"), "is empty"),
        (rule("lots", None), "is not a byte size"),
        (rule(0, None, speed="fast"), "unknown field(s) speed"),
    ],
)
def test_bad_rows_are_refused_in_one_line(row, words):
    with pytest.raises(UsageProblem) as err:
        nccl.tuner_rules([row])
    assert words in err.value.format_message()


def test_rules_of_different_collectives_do_not_interact():
    rules = nccl.tuner_rules([rule(0, None), rule(0, None, collective="allgather")])
    assert [r.collective for r in rules] == ["allreduce", "allgather"]


# --- the commands ------------------------------------------------------------------------------------------


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_nccl_env_prints_evaluable_shell():
    result = run("nccl", "env", "--machine-type", "a3-megagpu-8g")
    assert result.exit_code == 0, result.output
    assert "export NCCL_FASTRAK_CTRL_DEV=enp0s12" in result.output
    assert result.output.startswith("# NCCL profile tcpxo for a3-megagpu-8g on vm")


def test_nccl_env_options_and_set_win_and_json_shows_nics():
    result = run(
        "nccl", "env", "-m", "a3-highgpu-8g", "--platform", "container", "--format", "json",
        "--debug", "INFO", "--algo", "Ring", "--set", "NCCL_DEBUG=TRACE", "--set", "MY_VAR=x y",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["flavor"] == "tcpx" and data["platform"] == "container"
    assert data["gpu_nics"] == ["eth1", "eth2", "eth3", "eth4"]
    assert data["env"]["NCCL_DEBUG"] == "TRACE"  # --set wins over --debug
    assert data["env"]["NCCL_ALGO"] == "Ring"
    assert data["env"]["MY_VAR"] == "x y"


def test_root_json_format_selects_json():
    result = run("--format", "json", "nccl", "env", "-m", "a2-highgpu-1g")
    assert json.loads(result.output)["env"]["NCCL_SOCKET_IFNAME"] == "^lo,docker"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--machine-type", "a3-highgpu-9g"], "--machine-type 'a3-highgpu-9g' is not a known GPU machine type"),
        (["-m", "a2-highgpu-1g", "--set", "NCCL_DEBUG"], "--set 'NCCL_DEBUG' is not NAME=VALUE"),
        (["-m", "a2-highgpu-1g", "--proto", "Fast"], "--proto 'Fast' is not a comma list"),
        (["-m", "a2-highgpu-1g", "--set", "NCCL_ALGO=Best"], "--set NCCL_ALGO 'Best' is not a comma list"),
    ],
)
def test_nccl_env_errors_are_one_line_exit_2(args, words):
    result = CliRunner().invoke(main, ["nccl", "env", *args])
    assert result.exit_code == 2
    assert words in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_tuner_config_writes_a_file_and_validates_a_table(tmp_path):
    out = tmp_path / "tuner.conf"
    assert run("nccl", "tuner-config", "-o", str(out)).exit_code == 0
    assert "allreduce,4194304,18446744073709551615,ring,simple,-1" in out.read_text()
    table = tmp_path / "table.yaml"
    table.write_text(
        "- {collective: allreduce, from: 0, to: 1MiB, algorithm: tree, protocol: ll}\n"
        "- {collective: allreduce, from: 512KiB, to: max, algorithm: ring, protocol: simple}\n"
    )
    result = CliRunner().invoke(main, ["nccl", "tuner-config", "--table", str(table), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "overlap" in result.output and not (tmp_path / "x").exists()


def test_profiles_lists_every_flavour():
    result = run("nccl", "profiles")
    assert result.exit_code == 0
    for flavor in nccl.FLAVORS:
        assert flavor in result.output
    assert "nccl-plugin-gib:v1.1.0" in result.output
