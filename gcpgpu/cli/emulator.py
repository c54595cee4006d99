"""`gcpgpu emulator`: run the offline GCP emulator and point tools at it."""

from __future__ import annotations

import json
import os
import shlex
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings

DEFAULT_PORT = 8085


PROJECT = "emulator-project"  # the project gcloud-env gives gcloud when none is set; any name works in the emulator


def gcloud_config_dir(address: str) -> Path:
    """The scratch gcloud configuration folder of the emulator at `address`: one per emulator, the
    user's own, so two emulators (or two users) never share one and the real configuration stays as it is."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache) / "gcpgpu" / "emulator-gcloud" / address.replace(":", "-").strip("[]")


def _gcloud_known(section: str) -> set[str] | None:
    """The properties the installed gcloud has in `section` (api_endpoint_overrides), read from its SDK's
    properties.py; None when that cannot be found (then every override is written: gcloud ignores a
    property it does not know in its configuration file, where `gcloud config set` would fail on it)."""
    import re
    import shutil

    gcloud = shutil.which("gcloud")
    if gcloud is None:
        return None
    source = Path(os.path.realpath(gcloud)).parent.parent / "lib" / "googlecloudsdk" / "core" / "properties.py"
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        return None
    block = re.search(rf"super\(\w+, self\).__init__\('{section}'\)(.*?)\nclass ", text, re.S)
    return set(re.findall(r"self\._Add\(\s*'([a-z0-9_]+)'", block.group(1))) if block else None


def _write_gcloud_config(config_dir: str, overrides: dict[str, str], project: str | None,
                         location: dict[str, str]) -> list[str]:
    """Write a scratch gcloud configuration that points gcloud at the emulator (no credentials, every API it
    serves that this gcloud knows, the project and compute/region, compute/zone the user had, so nothing
    changes under them) straight into its file, as `gcloud config set` would, without starting gcloud a
    dozen times (ten seconds, and a warning paragraph each). Returns the shell lines to eval."""
    import configparser

    known = _gcloud_known("api_endpoint_overrides")
    config = configparser.ConfigParser(interpolation=None)
    config["auth"] = {"disable_credentials": "true"}
    config["api_endpoint_overrides"] = {api: url for api, url in sorted(overrides.items())
                                        if known is None or api in known}
    config["core"] = {"project": project or PROJECT}
    if location:
        config["compute"] = dict(location)
    config["component_manager"] = {"disable_update_check": "true"}
    folder = Path(config_dir)
    (folder / "configurations").mkdir(parents=True, exist_ok=True)
    with open(folder / "configurations" / "config_default", "w", encoding="utf-8") as f:
        config.write(f)
    (folder / "active_config").write_text("default", encoding="utf-8")
    return [f"export CLOUDSDK_CONFIG={shlex.quote(config_dir)}"]


def _announce(emu: Any, state_file: str | None) -> None:
    address = emu.address
    lines = [
        f"gcpgpu emulator listening on http://{address} (REST)"
        + (f" and {emu.info()['grpc']} (gRPC)" if emu.grpc_port else ""),
        "Everything is simulated in memory: no VM, GPU or network exists." + (
            f" State is kept in {state_file}." if state_file else ""),
        _user_commands_line(emu),
        "",
        "Point gcpgpu at it:",
        f"  export GCPGPU_EMULATOR={address}      # or: gcpgpu --emulator {address} ...",
        "",
        "Point Google's Python client libraries at it:",
        "  from google.auth.credentials import AnonymousCredentials",
        "  from google.cloud import compute_v1",
        f"  compute_v1.InstancesClient(credentials=AnonymousCredentials(), client_options={{'api_endpoint': 'http://{address}'}})",
        "  (or let gcpgpu.gcp.clients.Clients(emulator=...) build them: it also redirects operation polling)",
        f"  Cloud Storage: export STORAGE_EMULATOR_HOST=http://{address}  (google-cloud-storage reads it)",
        "",
        "Point gcloud at it (a scratch configuration of this emulator's own; your real one is untouched):",
        f'  eval "$(gcpgpu --emulator {address} emulator gcloud-env)"',
        "",
        "Stop with Ctrl-C (or SIGTERM).",
    ]
    click.echo("\n".join(lines), err=True)


def _user_commands_line(emu: Any) -> str:
    """Whether jobs' own commands run here: code that arrives over HTTP runs on this machine when they do."""
    user = emu.user_commands
    if not user.allowed:
        return ("Jobs' own commands (--command, --workdir) do NOT run: such jobs fail at once. "
                "Start with --run-user-commands to run them, each in a bubblewrap sandbox.")
    why = user.refusal()
    if why is not None:
        return f"Jobs' own commands (--command, --workdir) cannot run: {why}."
    return ("Jobs' own commands (--command, --workdir) RUN on this machine, each in a bubblewrap sandbox "
            "(--run-user-commands).")


def _address(settings: Settings) -> str:
    if not settings.emulator:
        raise UsageProblem("no emulator given: pass --emulator HOST:PORT or set GCPGPU_EMULATOR")
    return settings.emulator


def _control(address: str, what: str, method: str = "GET", body: dict | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{address}/_emulator/{what}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback emulator
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        detail = json.loads(e.read() or b"{}").get("error", {}).get("message", str(e))
        raise CloudError(f"emulator at {address}: {detail}") from e
    except OSError as e:
        raise CloudError(f"cannot reach the emulator at {address} ({e}); start it with 'gcpgpu emulator start'") from e


def _parse_settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    from gcpgpu.specfile import parse_pairs

    out: dict[str, Any] = {}
    for key, value in parse_pairs(pairs, "--set", example="error_rate=0.3").items():
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _load_faults_file(path: str) -> dict:
    import yaml

    text = Path(path).read_text()
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise UsageProblem(f"--faults {path}: expected a mapping of fault settings, got {type(data).__name__}")
    return data


@click.group()
def emulator() -> None:
    """Run the offline GCP emulator (Compute Engine, Cloud Storage, Cloud Monitoring, Vertex AI, ...) and point tools at it."""


def _port(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """A TCP port, in one line when it is none (click's own range error comes under a usage banner)."""
    if not 0 <= value <= 65535:
        raise UsageProblem(f"--{param.name.replace('_', '-')} {value}: a port is 1-65535 (0 picks a free one)")
    return value


@emulator.command()
@click.option("--port", type=int, callback=_port, default=DEFAULT_PORT, show_default=True,
              help="REST port on 127.0.0.1 (the one gcloud's api_endpoint_overrides names); 0 picks a free one.")
@click.option("--grpc-port", type=int, callback=_port, default=0,
              help="gRPC port on 127.0.0.1 (Vertex AI, Cloud Build, Cloud Monitoring's clients); "
                   "default: a free one. 'gcpgpu emulator info' shows it.")
@click.option("--state-file", type=click.Path(dir_okay=False), help="Load state from FILE at start, save it there on stop.")
@click.option("--faults", "faults_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML/JSON file of fault settings ('gcpgpu emulator faults --help' lists the keys).")
@click.option("--seed", type=int, help="Seed for injected failures (deterministic runs).")
@click.option("--latency-ms", type=click.FloatRange(0), help="Latency added to every API request.")
@click.option("--operation-seconds", type=click.FloatRange(0), help="How long each operation takes to finish.")
@click.option("--error-rate", type=click.FloatRange(0, 1), help="Share of mutating requests answered with 503.")
@click.option("--run-user-commands", is_flag=True,
              help="Run jobs' own commands (--command, --workdir) for real on this machine, each in a bubblewrap "
                   "sandbox. Without it such jobs fail at once: a command that arrives over HTTP is code execution.")
def start(port: int, grpc_port: int, state_file: str | None, faults_file: str | None, seed: int | None,
          latency_ms: float | None, operation_seconds: float | None, error_rate: float | None,
          run_user_commands: bool) -> None:
    """Serve the emulator on 127.0.0.1 until Ctrl-C or SIGTERM.

    It binds the loopback address only: it has no authentication and must never face a network.
    Jobs that run the bundled trainer run locally; other commands only with --run-user-commands.
    """
    from gcpgpu.fakes.core import Faults
    from gcpgpu.fakes.server import PortUnavailable, serve_forever

    settings: dict[str, Any] = _load_faults_file(faults_file) if faults_file else {}
    for key, value in (("seed", seed), ("latency_ms", latency_ms), ("operation_seconds", operation_seconds),
                       ("error_rate", error_rate)):
        if value is not None:
            settings[key] = value
    try:
        faults = Faults.from_dict(settings)
    except (TypeError, ValueError) as e:
        raise UsageProblem(f"--faults: {e}") from e
    try:
        serve_forever(port, state_file=state_file, faults=faults, announce=lambda emu: _announce(emu, state_file),
                      run_user_commands=run_user_commands, grpc_port=grpc_port)
    except PortUnavailable as e:  # not a file it reads (the state file, its own data): those raise as they are
        flag = "--port" if e.server == "REST" else "--grpc-port"
        raise UsageProblem(f"{flag} {e.port}: cannot listen on 127.0.0.1:{e.port} for {e.server} ({e.strerror}); "
                           f"choose another {flag} (0 picks a free one)") from e
    if state_file:  # what a restart gets back, and what it does not
        info(f"Stopped. Saved to {state_file}: every resource, secret and job record; not the processes that ran "
             "(a restart on it finds their jobs lost to a host error, and recovers those that say so).")
    else:
        info("Stopped. Nothing was kept: every resource is gone (--state-file FILE keeps them for the next start).")


@emulator.command("info")
@click.pass_obj
def info_cmd(settings: Settings) -> None:
    """Show what a running emulator serves and on which ports."""
    emit(_control(_address(settings), "info"))


class _FaultsCommand(click.Command):
    """Its --help ends with the keys the emulator accepts, read from the emulator's own Faults (imported only then)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from gcpgpu.fakes.core import Faults

        with formatter.section("Keys (--set KEY=VALUE, or in --file)"):
            formatter.write_text(", ".join(Faults.keys()))
        super().format_epilog(ctx, formatter)


@emulator.command(cls=_FaultsCommand)
@click.option("--set", "pairs", multiple=True, metavar="KEY=VALUE",
              help="Change one fault setting, e.g. --set error_rate=0.3 or --set 'capacity={\"us-central1-a\": {\"a3-highgpu-8g\": 0}}'.")
@click.option("--file", "faults_file", type=click.Path(exists=True, dir_okay=False), help="Apply settings from a YAML/JSON file.")
@click.pass_obj
def faults(settings: Settings, pairs: tuple[str, ...], faults_file: str | None) -> None:
    """Show, or change, a running emulator's injected faults."""
    address = _address(settings)
    changes = {**(_load_faults_file(faults_file) if faults_file else {}), **_parse_settings(pairs)}
    result = _control(address, "faults", "PUT", changes) if changes else _control(address, "faults")
    emit(result)


@emulator.command()
@click.pass_obj
def reset(settings: Settings) -> None:
    """Forget every resource, fault and logged request of a running emulator."""
    _control(_address(settings), "reset", "POST", {})
    info("emulator reset")


@emulator.command("gcloud-env")
@click.option("--config-dir", metavar="DIR",
              help="Scratch CLOUDSDK_CONFIG folder (default: one per emulator, "
                   "$XDG_CACHE_HOME/gcpgpu/emulator-gcloud/HOST-PORT), so your real gcloud configuration is untouched.")
@click.pass_obj
def gcloud_env(settings: Settings, config_dir: str | None) -> None:
    """Point gcloud at a running emulator: write a scratch gcloud configuration and print the line that
    selects it (eval it). Instant and quiet: gcloud itself is not run.

    Every API the emulator serves over REST that the installed gcloud knows gets its
    api_endpoint_overrides (compute, ai, logging, monitoring, storage, ...), so `gcloud storage ls`
    lists the emulator's buckets.

    gcloud (and gcpgpu, which reads gcloud's configuration) keep the project you use now: --project,
    the environment, or your gcloud configuration's core/project; only when none is set do they get
    the placeholder emulator-project. Your region and zone, where set, are kept alike. Which project,
    and the folder, are said on stderr.
    """
    address = _address(settings)
    # settings.project refuses a malformed id here, in one line, rather than gcloud later.
    project = settings.project if settings.optional("project") is not None else None
    location = {key: value for key in ("region", "zone") if (value := settings.optional(key))}
    served = _control(address, "info")  # fail early, with one line, if nothing is listening there
    folder = config_dir or str(gcloud_config_dir(address))
    source = {"flag": "--project", "env": "the environment", "gcloud": "your gcloud configuration"}.get(
        settings.source("project") or "", "")
    base = f"http://{address}"
    lines = _write_gcloud_config(folder, served.get("gcloud_overrides") or {"compute": f"{base}/compute/v1/"},
                                 project, location)
    sys.stdout.write("\n".join(lines) + "\n")
    said = f"your project {project} (from {source})" if project else f"the placeholder project {PROJECT} (none was set)"
    said += "".join(f", {key} {value}" for key, value in location.items())
    info(f"gcloud and gcpgpu now use {said}, with the emulator at {address}; gcloud's configuration: {folder}")
