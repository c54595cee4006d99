"""Issue 49: the bundled trainer followed a link swapped in after its path was checked: a sandboxed job replaced
a checkpoint folder in the bucket by a link to a folder of the host, and the trainer (outside the sandbox) wrote
step_* folders there and pruned others. Now no save and no prune follows a link that was not there when the
trainer started: a swapped --ckpt-dir refuses the save, a swapped step folder is removed itself or left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gcpgpu.trainer import checkpoint  # noqa: E402
from gcpgpu.trainer.checkpointer import Checkpointer  # noqa: E402
from gcpgpu.trainer.ckpt_local import CkptPlace  # noqa: E402
from gcpgpu.trainer.nofollow import SwappedLink  # noqa: E402


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((8,), float(step))}, "train": {"step": step}}


def _host_folder(path: Path) -> dict[str, bytes]:
    """A folder of the machine the trainer runs on, looking like a checkpoint; what it holds, to compare after."""
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"the host's own")
    (path / "data.bin").write_bytes(b"precious")
    return _files(path)


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_ckpt_dir_swapped_for_a_link_after_the_start_is_never_written_through(tmp_path, mode):
    root, host = tmp_path / "bucket" / "ckpt", tmp_path / "host"
    before = _host_folder(host)
    ckpt = Checkpointer(str(root), CkptPlace(mode, tmp_path / "local" if mode == "async" else None, ""), rank=0,
                        local_rank=0, keep=1, device_type="cpu", dist_timeout=60)
    ckpt.save(1, lambda: _state(1))
    assert ckpt.wait(60) and checkpoint.latest(root) == root / "step_00000001"
    shutil.rmtree(root)
    root.symlink_to(host)  # the sandboxed job's move, while the trainer runs
    with pytest.raises((SwappedLink, RuntimeError), match="'ckpt' on its way is a link now"):
        ckpt.save(2, lambda: _state(2))
        ckpt.wait(60)  # async: the upload's error comes back to the training thread
    assert _files(host) == before  # nothing written there, nothing pruned


def test_step_folders_swapped_for_links_are_neither_written_through_nor_pruned_through(tmp_path):
    root, old_host, next_host = tmp_path / "bucket" / "ckpt", tmp_path / "host-old", tmp_path / "host-next"
    old_before, next_before = _host_folder(old_host), _host_folder(next_host)
    ckpt = Checkpointer(str(root), CkptPlace("sync", None, ""), rank=0, local_rank=0, keep=1, device_type="cpu",
                        dist_timeout=60)
    ckpt.save(1, lambda: _state(1))
    shutil.rmtree(root / "step_00000001")
    (root / "step_00000001").symlink_to(old_host)  # an old step, to be pruned
    (root / "step_00000002").symlink_to(next_host)  # the step about to be saved
    ckpt.save(2, lambda: _state(2))
    assert _files(old_host) == old_before and _files(next_host) == next_before
    saved = root / "step_00000002"
    assert saved.is_dir() and not saved.is_symlink() and checkpoint.complete(saved)
    loaded = {"model": {"w": torch.zeros(8)}, "train": {"step": 0}}
    torch.distributed.checkpoint.load(loaded, checkpoint_id=saved)
    assert torch.equal(loaded["model"]["w"], torch.full((8,), 2.0))
    assert (root / "step_00000001").is_symlink()  # no checkpoint of the trainer's: left as it is, not followed
