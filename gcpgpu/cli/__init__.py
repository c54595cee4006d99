"""The `gcpgpu` command: global options, lazily loaded subcommands, and error handling.

Subcommands live one module each (a package for the biggest group) and are listed in COMMANDS as
"module:attribute". Nothing in COMMANDS is imported until that command runs: `gcpgpu --help` reads each
command's one-line summary from its module's source instead, because importing the modules would
drag in Google's client libraries (seconds) for a help screen.

cluster/     `gcpgpu cluster`: up, down, status, list, plan, ssh, doctor, repair, autostop, storage
job.py       `gcpgpu job`: submit, status, follow, list, logs, cancel
attach.py    `gcpgpu job attach`: a shell or command in a running job's container (cluster), or its replicas' shell URIs (Vertex)
container.py `gcpgpu container build`: the training image
metrics.py   `gcpgpu metrics`: tail, report, dashboard
reservation.py `gcpgpu reservation`: reservations, their blocks, calendar-mode future reservations
plan.py      `gcpgpu plan`: estimates made before anything is created or run
plan_train.py `gcpgpu plan train`: a training run's time and cost from FLOPs, MFU and the catalog's price
catalog.py   `gcpgpu catalog`: the GPU machine types gcpgpu knows
cost.py      `gcpgpu cost report`: what clusters and jobs cost, by job, cluster, label or user
nccl.py      `gcpgpu nccl`: the NCCL environment per machine type, and the tuner plugin's config
emulator.py  `gcpgpu emulator`: the offline GCP emulator, and pointing tools at it
demo.py      `make demo`: the walk-through against the offline emulator
options.py   the global options, defined once and lifted onto every command
progress.py  how a long cluster command shows its progress on a terminal
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

import click

from gcpgpu import __version__
from gcpgpu.cli.options import adopt_global_options, enable_verbose_logging, root_options
from gcpgpu.errors import CloudError, Interrupted, describe_google_error, is_connection_error, is_google_error
from gcpgpu.settings import Settings

# name -> "module:attribute" of a click command. A registered module that does not exist
# yet is left out of listings and help, so the registry can run ahead of the code.
COMMANDS: dict[str, str] = {
    "catalog": "gcpgpu.cli.catalog:catalog",
    "cluster": "gcpgpu.cli.cluster.group:cluster",
    "container": "gcpgpu.cli.container:container",
    "cost": "gcpgpu.cli.cost:cost",
    "emulator": "gcpgpu.cli.emulator:emulator",
    "job": "gcpgpu.cli.job:job",
    "metrics": "gcpgpu.cli.metrics:metrics",
    "nccl": "gcpgpu.cli.nccl:nccl",
    "plan": "gcpgpu.cli.plan:plan",
    "reservation": "gcpgpu.cli.reservation:reservation",
}


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package
        return False


def _stub_from_source(name: str, target: str) -> click.Command:
    """A help-only stand-in for a lazy command, built from its module's source without importing it.

    It carries the help, short_help, hidden and deprecated that the decorator or docstring
    give, so click shortens the summary exactly as it would for the real command.
    """
    module, _, attr = target.partition(":")
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec else None
        tree = (
            ast.parse(Path(origin).read_text(encoding="utf-8")) if origin and origin.endswith(".py") else None
        )
    except (ImportError, OSError, SyntaxError, ValueError):
        tree = None
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            keywords = {
                kw.arg: kw.value.value
                for decorator in node.decorator_list
                # the command's own decorator (click.group, x.command): an option's help= is not the command's
                if isinstance(decorator, ast.Call) and _decorator_name(decorator.func) in ("command", "group")
                for kw in decorator.keywords
                if kw.arg in ("help", "short_help", "hidden", "deprecated")
                and isinstance(kw.value, ast.Constant)
            }
            keywords.setdefault("help", ast.get_docstring(node))
            return click.Command(name, **keywords)
    return click.Command(name)


def _decorator_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked (or asked for by name)."""

    def __init__(
        self, *args: object, lazy_commands: Mapping[str, str] | None = None, **kwargs: object
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_commands: Mapping[str, str] = lazy_commands if lazy_commands is not None else {}

    def _available(self) -> list[str]:
        return [name for name, target in self.lazy_commands.items() if _module_exists(target.split(":")[0])]

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._available()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = self.lazy_commands[cmd_name].partition(":")
        if not _module_exists(module_name):
            return None  # registered ahead of its module: "No such command", not a traceback
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attr} is not a click command")
        return adopt_global_options(command)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Click's own version imports every command for its summary; lazy ones get a stub instead.
        commands = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or _stub_from_source(name, self.lazy_commands[name])
            if not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in commands])

    def invoke(self, ctx: click.Context) -> object:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a reader that went away shows here, not as noise at interpreter exit
            return result
        except KeyboardInterrupt:
            raise Interrupted() from None
        except BrokenPipeError:  # a ConnectionError to Python, but no cloud's fault: `| head` quit
            _stdout_closed()
        except Exception as exc:
            if is_google_error(exc):
                message = describe_google_error(exc)
            elif is_connection_error(exc):
                message = f"cannot reach the API endpoint: {_connection_target(ctx, exc)}"
            else:
                raise  # our own bug: the traceback is the useful report
            if getattr(ctx.find_root().obj, "verbose", False):  # -v anywhere on the line
                traceback.print_exception(exc, file=sys.stderr)
            raise CloudError(message) from exc


EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what the shell reports for any tool whose reader quit early


def _stdout_closed() -> NoReturn:
    """Stop quietly when stdout's reader has gone (`| head`, `less` quitting): nothing more to print."""
    try:  # the unwritten buffer must not be flushed again at exit ("Exception ignored ... BrokenPipeError")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # not a real file (tests capture stdout): nothing is flushed at exit
    raise click.exceptions.Exit(EXIT_STDOUT_CLOSED)


def _connection_target(ctx: click.Context, exc: BaseException) -> str:
    settings = ctx.find_root().obj
    emulator = getattr(settings, "emulator", None)
    if emulator:
        return f"no emulator answers at {emulator} (start one with 'gcpgpu emulator start')"
    return f"{type(exc).__name__} (check your network connection)"


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Examples:
  gcpgpu catalog                                  GPU machine types, GPUs, NICs and prices
  gcpgpu --format json catalog show a3-highgpu-8g one machine type, for scripts
  gcpgpu --emulator 127.0.0.1:8085 ...            any command, against a local emulator
  gcpgpu cluster status demo --format json        global options also work after the command

Run 'gcpgpu COMMAND --help' for a command's own options.""",
)
@root_options
@click.version_option(__version__, "--version", prog_name="gcpgpu", message="%(prog)s %(version)s")
@click.pass_context
def main(
    ctx: click.Context,
    project: str | None,
    region: str | None,
    zone: str | None,
    output_format: str,
    emulator: str | None,
    verbose: bool,
) -> None:
    """Create GPU clusters, run training jobs and watch their metrics on Google Cloud.

    \b
    Project, region and zone are looked up only by the commands that need
    them, each in this order:
      1. the flag (--project, --region, --zone);
      2. the environment: GOOGLE_CLOUD_PROJECT, then CLOUDSDK_CORE_PROJECT;
         CLOUDSDK_COMPUTE_REGION; CLOUDSDK_COMPUTE_ZONE;
      3. the active gcloud configuration ($CLOUDSDK_CONFIG or ~/.config/gcloud,
         chosen by $CLOUDSDK_ACTIVE_CONFIG_NAME or gcloud's active_config).
    A region not set anywhere is taken from the zone.

    \b
    The options below may come anywhere on the line, as gcloud's do
    (gcpgpu cluster list --project p); the last one given wins.

    \b
    Results go to stdout and progress to stderr. Exit status: 0 success,
    1 a cloud failure, 2 a usage error, 130 interrupted, 141 stdout closed
    early (a reader such as head quit; nothing is printed about it).
    """
    if verbose:
        enable_verbose_logging()
    ctx.obj = Settings(
        project_flag=project,
        region_flag=region,
        zone_flag=zone,
        format=output_format,
        emulator=emulator,
        verbose=verbose,
    )
