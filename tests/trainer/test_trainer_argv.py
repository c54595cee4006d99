"""The trainer's command-line contract, which the tool, the image's launcher and the emulator all read."""

from __future__ import annotations

import ast
import sys

import pytest

import gcpgpu.trainer.argv as argv


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--steps", "5"], None),
        (["--log-json", "a.jsonl", "--steps", "5"], "a.jsonl"),
        (["--log-json=b c.jsonl"], "b c.jsonl"),
        (["--log-json", "a", "--log-json=b"], "b"),  # argparse keeps the last
        (["--log-json"], None),
        (["--steps", "5", "--", "--log-json", "x"], None),
    ],
)
def test_log_json_path(args, expected):
    assert argv.log_json_path(args) == expected


@pytest.mark.parametrize(
    ("image", "command", "expected"),
    [
        ("us-central1-docker.pkg.dev/p/gcpgpu/gcpgpu-trainer:latest", [], ["--steps", "5"]),
        ("gcpgpu-trainer@sha256:" + "0" * 64, [], ["--steps", "5"]),
        ("us-docker.pkg.dev/p/r/other:latest", [], None),  # another image's entrypoint: not ours to read
        ("any:1", ["python3", "-m", "gcpgpu.trainer", "--model", "tiny"], ["--model", "tiny", "--steps", "5"]),
        ("any:1", ["/usr/bin/python3.11", "-m", "gcpgpu.trainer"], ["--steps", "5"]),
        ("gcpgpu-trainer:1", ["bash", "-c", "python -m gcpgpu.trainer"], None),  # a command replaces the entrypoint
    ],
)
def test_the_trainers_arguments_in_a_container(image, command, expected):
    assert argv.trainer_args(image, command, ["--steps", "5"]) == expected
    assert argv.runs_bundled_trainer(image, command) is (expected is not None)


def test_the_trainers_flags_in_a_local_command_line():
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "-m", "gcpgpu.trainer", "--steps", "3"]
    assert argv.args_in_command_line(torchrun) == ["--steps", "3"]
    assert argv.args_in_command_line([sys.executable, "-m", "gcpgpu.node.reporter", "--steps", "3"]) == []


@pytest.mark.parametrize(("value", "off"), [("0", True), (" Off ", True), ("false", True), ("1", False), ("", False)])
def test_gcpgpu_metrics_turns_the_reporter_off(value, off):
    assert argv.metrics_off({"GCPGPU_METRICS": value}) is off
    assert argv.metrics_off({}) is False


def test_it_imports_only_the_standard_library():
    # The emulator imports this module and nothing else of gcpgpu; the trainer's room is stdlib and torch.
    tree = ast.parse(open(argv.__file__).read())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert all(not isinstance(node, ast.ImportFrom) or node.level == 0 for node in ast.walk(tree))
    assert {m.split(".")[0] for m in imported} <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_output_path_flags_the_emulator_keeps_inside_are_every_path_the_trainer_writes():
    # The emulator runs the trainer outside any sandbox and maps these (fakes/host/storage.py): a path
    # option added to the trainer must be added here, or its files land wherever it points on the host.
    from dataclasses import fields

    from gcpgpu.trainer.config import TrainConfig, build_parser

    options = {a.option_strings[0] for a in build_parser()._actions if a.option_strings}
    written = {"--ckpt-dir", "--ckpt-local-dir", "--log-json", "--tensorboard-dir", "--profile-dir"}
    read = {"--config", "--data"}
    named_like_paths = {o for o in options if o.endswith(("-dir", "-json", "-path", "-file")) or o in read}
    assert set(argv.OUTPUT_PATH_FLAGS) == written and named_like_paths == written | read
    # ...and its --config file's keys for them are these flags' names (the emulator reads those too).
    assert argv.CONFIG_FLAG == "--config"
    assert {f.name for f in fields(TrainConfig)} >= {o[2:].replace("-", "_") for o in written}
