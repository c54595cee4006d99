"""`gcpgpu nccl`: the NCCL environment per machine type, and the tuner-plugin config (no API calls)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gcpgpu import catalog
from gcpgpu import nccl as profiles
from gcpgpu.errors import UsageProblem
from gcpgpu.output import current_format, emit, info

# Option name -> the NCCL variable it sets; each is also reachable as --set NAME=VALUE.
_KNOB_OPTIONS = {
    "algo": ("NCCL_ALGO", "Algorithms, e.g. Ring or Ring,Tree (^ excludes)."),
    "proto": ("NCCL_PROTO", "Protocols, e.g. Simple or Simple,LL128."),
    "buffsize": ("NCCL_BUFFSIZE", "Bytes of buffer per channel and peer."),
    "nsocks_perthread": ("NCCL_NSOCKS_PERTHREAD", "Sockets per helper thread (socket transports)."),
    "socket_nthreads": ("NCCL_SOCKET_NTHREADS", "Helper threads per connection (socket transports)."),
    "min_nchannels": ("NCCL_MIN_NCHANNELS", "Fewest channels NCCL may use."),
    "debug": ("NCCL_DEBUG", "VERSION, WARN, INFO or TRACE."),
    "debug_subsys": ("NCCL_DEBUG_SUBSYS", "e.g. INIT,NET or ALL."),
}


@click.group()
def nccl() -> None:
    """NCCL settings for Google's GPU networks: environment and tuner config.

    \b
    Each machine type's GPUDirect flavour (see 'gcpgpu catalog') has a profile of
    the NCCL variables Google publishes for it: none (plain sockets: A2, G2),
    tcpx (A3 High), tcpxo (A3 Mega) or rdma (A3 Ultra, A4). The training image's
    entrypoint applies the same profile at start; these commands show it.
    """


def _knob_options(command: click.Command) -> click.Command:
    for param, (variable, text) in reversed(_KNOB_OPTIONS.items()):
        flag = "--" + param.replace("_", "-")
        command = click.option(flag, param, metavar="VALUE", help=f"{variable}: {text}")(command)
    return command


@nccl.command("env")
@click.option("--machine-type", "-m", required=True, metavar="MT", help="GPU machine type, e.g. a3-megagpu-8g.")
@click.option(
    "--platform",
    type=click.Choice(profiles.PLATFORMS),
    default="vm",
    show_default=True,
    help="Where NCCL runs, which decides the NIC names: vm (or a container with --network=host "
    "on one), container (a GKE pod: eth0, eth1..) or vertex (Vertex AI, named as in a pod).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["shell", "json"]),
    default=None,
    help="shell: export lines to eval; json: the variables with the NIC names and flavour. "
    "Default: shell, or json/yaml under 'gcpgpu --format json|yaml'.",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="NAME=VALUE",
    help="Set or override any variable (repeatable); wins over the profile and the options below.",
)
@_knob_options
def env(machine_type: str, platform: str, fmt: str | None, assignments: tuple[str, ...], **knobs: str | None) -> None:
    """Print the NCCL environment for a machine type.

    \b
    The flavour follows the machine type; interface names follow the platform.
    Your values win: an option below, or --set for any variable.
    LD_LIBRARY_PATH is put in front of the one the shell already has.

    \b
    Examples:
      eval "$(gcpgpu nccl env -m a3-highgpu-8g)"
      gcpgpu nccl env -m a3-megagpu-8g --platform container --debug INFO
      gcpgpu nccl env -m a2-highgpu-8g --set NCCL_SOCKET_IFNAME=ens4 --format json
    """
    machine = catalog.get_machine_type(machine_type)
    overrides: dict[str, str] = {}
    for param, value in knobs.items():
        if value is not None:
            variable = _KNOB_OPTIONS[param][0]
            profiles.check_knob(variable, value, "--" + param.replace("_", "-"))
            overrides[variable] = value
    overrides.update(profiles.parse_assignments(assignments))
    result = profiles.render_env(machine, platform, overrides)
    # Without --format, the root's --format json|yaml asks for data; a table is no use for env vars.
    fmt = fmt or (current_format() if current_format() in ("json", "yaml") else "shell")
    if fmt == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    if fmt == "yaml":
        emit(result.as_dict(), fmt="yaml")
        return
    click.echo(f"# NCCL profile {result.flavor} for {machine.name} on {platform}; "
               f"{profiles.PROFILES[result.flavor].summary}", nl=True)
    click.echo(profiles.format_shell(result), nl=False)


def _machines_of(flavor: str) -> str:
    """'a2, a3-highgpu-1g, g2': whole families by name, single machine types where a family is split."""
    machines = list(catalog.machine_types().values())
    names: list[str] = []
    for family in dict.fromkeys(m.family for m in machines):
        members = [m for m in machines if m.family == family]
        chosen = [m.name for m in members if m.gpudirect == flavor]
        names += [family] if len(chosen) == len(members) else chosen
    return ", ".join(names)


@nccl.command("profiles")
def list_profiles() -> None:
    """List the NCCL profiles, what each needs on the host, and where the values come from."""
    rows = [
        {
            "flavor": p.flavor,
            "machine_types": _machines_of(p.flavor),
            "plugin_image": p.plugin_image,
            "host_needs": p.host_needs,
            "source": p.source,
        }
        for p in profiles.PROFILES.values()
    ]
    emit(rows, ["flavor", "machine_types", "plugin_image", "host_needs"])


@nccl.command("tuner-config")
@click.option(
    "-o", "--output", "output", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
    help="Write the config here instead of stdout.",
)  # fmt: skip
@click.option(
    "--table", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
    help="A YAML list of rules (collective, from, to, algorithm, protocol, channels) instead of "
    "the built-in table.",
)  # fmt: skip
def tuner_config(output: str | None, table: str | None) -> None:
    """Write a tuner-plugin config (CSV) from a small declarative table.

    \b
    One line per rule: collective,minBytes,maxBytes,algorithm,protocol,channels,
    as NCCL's example tuner plugin reads it. A table gives each collective
    [from, to) byte ranges, e.g.
      - {collective: allreduce, from: 0, to: 64KiB, algorithm: tree, protocol: ll}
      - {collective: allreduce, from: 64KiB, to: max, algorithm: ring, protocol: simple}
    A collective's ranges must start at 0 and follow on to 'max' with no gap
    or overlap; anything else is refused before a file is written.
    """
    rows = profiles.DEFAULT_TUNER_TABLE
    if table:
        import yaml

        try:
            rows = yaml.safe_load(Path(table).read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise UsageProblem(f"--table {table}: not YAML ({str(e).splitlines()[0]})") from None
        if isinstance(rows, dict) and "rules" in rows:
            rows = rows["rules"]
        if not isinstance(rows, list):
            raise UsageProblem(f"--table {table}: expected a list of rules (or a mapping with 'rules:')")
    text = profiles.tuner_config(rows)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        info(f"Wrote {output}: set NCCL_TUNER_CONFIG_FILE={output} with a tuner plugin in NCCL_TUNER_PLUGIN.")
    else:
        click.echo(text, nl=False)
