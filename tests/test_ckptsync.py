"""GCPGPU_CKPT_DIR (gcpgpu/node/ckptsync.py): where the folder and its upload go, and the trainer's rule of a
complete checkpoint (step_NNNNNNNN with `.metadata`, copied last) applied to a user's step folders."""

from __future__ import annotations

import os
import threading

import pytest

from gcpgpu.node import ckptsync
from gcpgpu.node.workspace import ReplicaError
from gcpgpu.trainer import ckpt_rule


def _step(root, step: int, complete: bool = True, data: str = "x"):
    folder = ckpt_rule.folder(root, step)
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "weights.bin").write_text(data)
    if complete:
        (folder / ckpt_rule.COMMIT).write_text(f"save {step} {data}")
    return folder


@pytest.mark.parametrize("env, expected", [
    ({"GCPGPU_OUTPUT_DIR": "/out/run/", "GCPGPU_NODE_RANK": "1"}, "/out/run/ckpt/node-1"),
    ({"AIP_MODEL_DIR": "/out/base/model/"}, "/out/base/ckpt/node-0"),  # Vertex AI: the folder above model/
    ({}, None),
])
def test_the_destination_is_the_output_dirs_ckpt_folder_per_node(env, expected):
    dest = ckptsync.destination(env)
    assert (dest[0] if dest else None) == expected


def test_a_gs_output_is_written_through_its_mount_and_an_unmounted_bucket_is_one_line(tmp_path):
    (tmp_path / "b").mkdir()
    env = {"GCPGPU_OUTPUT_DIR": "gs://b/run", "GCPGPU_GCS_ROOT": str(tmp_path)}
    assert ckptsync.destination(env) == ("gs://b/run/ckpt/node-0", tmp_path / "b" / "run" / "ckpt" / "node-0")
    with pytest.raises(ReplicaError, match="gs://other/run/ckpt/node-0 cannot be written here: its bucket is not "
                                           "mounted"):
        ckptsync.destination({**env, "GCPGPU_OUTPUT_DIR": "gs://other/run"})


def test_the_folder_is_on_the_local_ssds_when_the_node_has_them(tmp_path):
    ssd = ckptsync.local_dir({"GCPGPU_CKPT_LOCAL_DIR": str(tmp_path)}, "gs://b/run/ckpt/node-0")
    assert ssd.parent == tmp_path and ssd != ckptsync.local_dir({"GCPGPU_CKPT_LOCAL_DIR": str(tmp_path)}, "gs://b/x")


def test_only_complete_folders_are_uploaded_metadata_last_and_each_once(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    _step(local, 1)
    _step(local, 2, complete=False)  # the command is still writing it
    done: set[str] = set()
    assert ckptsync.push(local, remote, done) == ["step_00000001"]
    assert ckpt_rule.same_save(local / "step_00000001", remote / "step_00000001")
    assert not (remote / "step_00000002").exists()
    (local / "step_00000002" / ckpt_rule.COMMIT).write_text("save 2")
    assert ckptsync.push(local, remote, done) == ["step_00000002"]
    assert ckptsync.push(local, remote, done) == []
    assert [p.name for p in ckpt_rule.completed(remote)] == ["step_00000001", "step_00000002"]


def test_the_upload_runs_until_stopped_and_then_sweeps_once_more(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    stop = threading.Event()
    stop.set()  # stopped before its first round: the last round still uploads what is complete
    _step(local, 7)
    ckptsync.upload(local, remote, "OUT", stop, every=0)
    assert ckpt_rule.latest(remote) == remote / "step_00000007"


def test_a_resume_brings_back_the_newest_complete_folder_and_nothing_else(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    _step(remote, 3)
    _step(remote, 5, data="five")
    _step(remote, 9, complete=False)  # a half upload of a preempted node: never counts
    _step(local, 4)  # an older attempt's leftovers on this node
    restored = ckptsync.prepare(local, remote, resume=True)
    assert restored == local / "step_00000005"
    assert [p.name for p in local.iterdir()] == ["step_00000005"]
    assert ckpt_rule.same_save(remote / "step_00000005", restored)
    assert (restored / "sub" / "weights.bin").read_text() == "five"
    assert ckptsync.prepare(local, remote, resume=False) is None and not any(local.iterdir())


def test_the_plan_exports_the_folder_and_says_when_nothing_is_uploaded(tmp_path, capsys):
    plan = ckptsync.env_plan({"GCPGPU_CKPT_LOCAL_DIR": str(tmp_path)})
    assert f"export GCPGPU_CKPT_DIR={tmp_path}/user{os.getuid()}-" in plan and "gcpgpu_ckpt_upload=0" in plan
    assert "no output directory" in capsys.readouterr().err
    out = tmp_path / "out"
    _step(out / "ckpt" / "node-0", 2)
    plan = ckptsync.env_plan({"GCPGPU_CKPT_LOCAL_DIR": str(tmp_path), "GCPGPU_OUTPUT_DIR": str(out),
                              "GCPGPU_RESUME": "1"})
    assert "gcpgpu_ckpt_upload=1" in plan
    assert f"step_00000002 restored from {out}/ckpt/node-0/step_00000002" in capsys.readouterr().err


def test_a_folder_it_cannot_prepare_leaves_the_command_running_without_it(tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")  # the local root is a file: nothing can be made under it
    monkeypatch.setenv("GCPGPU_CKPT_LOCAL_DIR", str(blocked))
    assert ckptsync.main(["env"]) == 0
    out, err = capsys.readouterr()
    assert out == "gcpgpu_ckpt_upload=0\n" and "cannot prepare the folder, so the command runs without it" in err


def test_its_notes_are_never_a_jobs_cause(tmp_path, capsys):
    """The notes went out as "gcpgpu-entrypoint: GCPGPU_CKPT_DIR: ...", which reads as the entrypoint refusing an
    input: every user command without an output directory then failed with that note as its cause."""
    from gcpgpu.jobs.logs import first_error_line

    ckptsync.env_plan({"HOME": str(tmp_path), "GCPGPU_CKPT_LOCAL_DIR": str(tmp_path / "ssd")})
    said = capsys.readouterr().err.splitlines()
    assert said and "no output directory" in said[0]
    assert first_error_line([*said, "ValueError: the command's own"]) == "ValueError: the command's own"
