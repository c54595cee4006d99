"""The trainer's command-line contract, as read from outside the trainer.

Three places must agree on it: the tool checks a job's trainer arguments before it submits
(gcpgpu/jobs/spec.py), the training image's launcher starts the metrics reporter when the trainer
writes --log-json (gcpgpu/node/launch.py), and the emulator runs such jobs as local processes
(gcpgpu/fakes/jobs, on the emulated host's runner in gcpgpu/fakes/host). Standard library only: the
emulator imports nothing else of gcpgpu, and the trainer's room is stdlib and torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePath

MODULE = "gcpgpu.trainer"
TORCHRUN_MODULE = "gcpgpu.trainer.torchrun"  # torchrun, ending without the interpreter's teardown
# Set (to 1) by a launcher whose trainers must not outlive it (the emulator's): each process then dies with its parent.
DIE_WITH_PARENT = "GCPGPU_DIE_WITH_PARENT"
# The gcpgpu training image (`gcpgpu container build` pushes it): its entrypoint runs
# torchrun -m gcpgpu.trainer with the container's arguments.
IMAGE = re.compile(r"(^|/)gcpgpu-trainer(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
# The trainer's options that name a file or folder it writes (flags, or keys of its --config file): the
# emulator, which runs it outside any sandbox, keeps them on the emulated node's disk or in a bucket.
OUTPUT_PATH_FLAGS = ("--ckpt-dir", "--ckpt-local-dir", "--log-json", "--tensorboard-dir", "--profile-dir")
CONFIG_FLAG = "--config"
# GCPGPU_METRICS values that turn the reporter off, in the image and in the emulator alike.
METRICS_OFF = ("0", "false", "no", "off")


def _runs_module(command: Sequence[str]) -> bool:
    return len(command) >= 3 and PurePath(command[0]).name.startswith("python") and list(command[1:3]) == ["-m", MODULE]


def runs_bundled_trainer(image: str, command: Sequence[str]) -> bool:
    """Whether a container runs gcpgpu's trainer: its image with no command, or `python -m gcpgpu.trainer`."""
    return bool(IMAGE.search(image)) if not command else _runs_module(command)


def trainer_args(image: str, command: Sequence[str], args: Sequence[str]) -> list[str] | None:
    """The trainer's own arguments in a container's (image, command, args); None when it runs something else."""
    if not runs_bundled_trainer(image, command):
        return None
    if not command and args and not str(args[0]).startswith("-"):
        # The image's entrypoint execs arguments that are not flags as a command (containers/entrypoint.sh):
        # how `job submit` keeps it in front of a user's command, and of `python -m gcpgpu.trainer`, on the
        # gcpgpu image.
        return list(args[3:]) if _runs_module(args) else None
    return [*command[3:], *args]


def args_in_command_line(argv: Sequence[str]) -> list[str]:
    """The trainer's flags in a local command line (what follows `-m gcpgpu.trainer`, torchrun's too), else none."""
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == MODULE:
            return list(argv[i + 2:])
    return []


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of the trainer's `FLAG VALUE` (or `FLAG=VALUE`) in `args`: the last one, as argparse takes it."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found or None


def log_json_path(args: Sequence[str]) -> str | None:
    """The trainer's `--log-json FILE`."""
    return flag_value(args, "--log-json")


LOG_EVERY_DEFAULT = 10  # the trainer's own default (trainer/config.py), kept equal by a test


def log_every(args: Sequence[str]) -> int:
    """Every how many steps the trainer logs a step line (`--log-every`)."""
    value = flag_value(args, "--log-every")
    return int(value) if value and value.isdigit() and int(value) > 0 else LOG_EVERY_DEFAULT


def metrics_off(environ: Mapping[str, str]) -> bool:
    """Whether the job's environment turns the trainer's metrics reporter off (GCPGPU_METRICS=0)."""
    return environ.get("GCPGPU_METRICS", "").strip().lower() in METRICS_OFF
