"""The global options, defined once: on `gcpgpu` itself and, lifted, on every command below it.

gcloud accepts its wide flags anywhere on the line (`gcloud compute instances list --project p`),
and so does gcpgpu: `GLOBAL_OPTIONS` decorates the root command, and `adopt_global_options`
gives every subcommand and sub-subcommand a hidden copy of each option it does not define
itself. A copy parses like the original (click knows which take a value, and nothing after `--`
is touched) and writes into the one Settings object of the run; the last occurrence on the line
wins, as in gcloud. A command's own option of the same name (`cluster up --zone`, `job submit
--region`, `metrics tail --format`) keeps precedence where it is given: the copy is not added.

Only click is imported here, so `gcpgpu --help` stays instant.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from gcpgpu.settings import FORMATS


@dataclass(frozen=True)
class GlobalOption:
    """One global option: its flags, the Settings field it sets, and click's keyword arguments."""

    decls: tuple[str, ...]  # click's declarations: flags and, for the root, the parameter name
    setting: str  # the Settings attribute it sets
    kwargs: dict[str, Any] = field(default_factory=dict)
    root_only: dict[str, Any] = field(default_factory=dict)  # defaults/envvars: the root's alone

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(d for d in self.decls if d.startswith("-"))


GLOBAL_OPTIONS: tuple[GlobalOption, ...] = (
    GlobalOption(("--project",), "project_flag", {
        "metavar": "PROJECT",
        "help": "Google Cloud project ID. Default: $GOOGLE_CLOUD_PROJECT, $CLOUDSDK_CORE_PROJECT, "
        "then the active gcloud configuration's core/project.",
    }),
    GlobalOption(("--region",), "region_flag", {
        "metavar": "REGION",
        "help": "Region, e.g. us-central1. Default: $CLOUDSDK_COMPUTE_REGION, gcloud's compute/region, "
        "then the region of the zone.",
    }),
    GlobalOption(("--zone",), "zone_flag", {
        "metavar": "ZONE",
        "help": "Zone, e.g. us-central1-a. Default: $CLOUDSDK_COMPUTE_ZONE, then gcloud's compute/zone.",
    }),
    GlobalOption(("--format", "output_format"), "format", {
        "type": click.Choice(FORMATS),
        "help": "How results print: a table for people, json or yaml for programs.",
    }, root_only={"default": "table", "show_default": True}),
    GlobalOption(("--emulator",), "emulator", {
        "metavar": "HOST:PORT",
        "help": "Send every Google API call to a gcpgpu emulator at HOST:PORT instead of Google Cloud.",
    }, root_only={"envvar": "GCPGPU_EMULATOR", "show_envvar": True}),
    GlobalOption(("-v", "--verbose"), "verbose", {
        "is_flag": True,
        "help": "Log what is done, and show tracebacks of cloud errors.",
    }),
)

EPILOG_NOTE = ("Global options (--project, --region, --zone, --format, --emulator, -v) may also come "
               "here; see 'gcpgpu --help'.")


def with_options(*options: Callable[[Callable], Callable]) -> Callable[[Callable], Callable]:
    """One decorator for a list of click options, which --help then shows in the order they are written."""
    def apply(fn: Callable) -> Callable:
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply


def root_options(fn: Callable) -> Callable:
    """Decorate the root command with every global option (as visible, documented options)."""
    for option in reversed(GLOBAL_OPTIONS):
        fn = click.option(*option.decls, **option.kwargs, **option.root_only)(fn)
    return fn


def enable_verbose_logging() -> None:
    """-v: gcpgpu's log records to stderr at DEBUG."""
    logger = logging.getLogger("gcpgpu")
    if not logger.handlers:  # main() may run many times in one process (tests)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def _setter(option: GlobalOption) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        # Unset (None, or a flag not given) leaves what an earlier position set alone.
        if value is None or value is False or ctx.resilient_parsing:
            return
        settings = ctx.find_root().obj
        if settings is None:  # the root's callback has not run (shell completion)
            return
        settings.update(**{option.setting: value})
        if option.setting == "verbose":
            enable_verbose_logging()

    return callback


def _taken(command: click.Command) -> set[str]:
    return {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)}


def adopt_global_options(command: click.Command) -> click.Command:
    """Give `command` (and, for a group, each command below it) hidden copies of the global options.

    Idempotent: a command is adopted once. Flags the command already defines are left out.
    """
    if getattr(command, "_gcpgpu_global_options", False):
        return command
    command._gcpgpu_global_options = True  # type: ignore[attr-defined]
    taken = _taken(command)
    for option in GLOBAL_OPTIONS:
        flags = [flag for flag in option.flags if flag not in taken]
        if not flags:
            continue
        command.params.append(click.Option(
            flags, **option.kwargs, hidden=True, expose_value=False, callback=_setter(option),
        ))
    command.epilog = f"{command.epilog}\n\n{EPILOG_NOTE}" if command.epilog else EPILOG_NOTE
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            adopt_global_options(sub)
    return command


def wanted_user(settings: Any, mine: bool, user: str | None) -> str | None:
    """Whose jobs or clusters a list shows (--mine, --user EMAIL); None: everyone's. Checked before any call."""
    from gcpgpu.errors import UsageProblem
    from gcpgpu.gcp import identity

    if mine and user:
        raise UsageProblem("--mine and --user exclude each other: choose one")
    if user is not None and user != identity.UNKNOWN and not identity.is_email(user):
        raise UsageProblem(f"--user {user!r} must be an e-mail address, like alice@example.com "
                           "(or 'unknown' for what was made before gcpgpu kept who made it)")
    return identity.whoami(settings.clients) if mine else user
