"""Checkpoints off the critical path (issue 40): the local folder and the default mode, the async save's
upload (`.metadata` last), which copy a resume reads, pruning in both places, the SIGTERM bound, and one
2-process run in which an async save blocks the steps for a quarter of a sync save's time at most.

The kill-mid-upload and bit-identical resume tests in both modes are in test_trainer_training.py, beside
the straight run they compare with."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _trainer_helpers import TINY, read_log, run  # noqa: E402

from gcpgpu.trainer import checkpoint, checkpointer  # noqa: E402
from gcpgpu.trainer.checkpointer import Checkpointer  # noqa: E402
from gcpgpu.trainer.ckpt_local import LOCAL_DIR_ENV, LOCAL_SSD, CkptPlace, folder_for, resolve  # noqa: E402
from gcpgpu.trainer.config import TrainConfig  # noqa: E402
from gcpgpu.trainer.train import STOP_GRACE_S, StopFlag, _finish_saves  # noqa: E402


def no_mount(path: str) -> bool:
    return False


def test_auto_is_async_only_where_a_local_disk_exists():
    plain = resolve("auto", "/gcs/b/ckpt", None, environ={}, ismount=no_mount)
    assert (plain.mode, plain.local_dir) == ("sync", None) and "no local disk" in plain.why
    ssd = resolve("auto", "/gcs/b/ckpt", None, environ={}, ismount=lambda p: p == LOCAL_SSD)
    assert ssd.mode == "async" and ssd.local_dir == folder_for("/mnt/localssd/gcpgpu-ckpt", "/gcs/b/ckpt")
    by_env = resolve("auto", "/gcs/b/ckpt", None, environ={LOCAL_DIR_ENV: "/scratch"}, ismount=no_mount)
    assert by_env.mode == "async" and by_env.local_dir.parent == Path("/scratch")
    by_flag = resolve("auto", "/gcs/b/ckpt", "/fast", environ={LOCAL_DIR_ENV: "/scratch"}, ismount=lambda p: True)
    assert by_flag.local_dir.parent == Path("/fast")  # the flag first, then the variable, then the SSDs
    # async asked for by name on a machine without a local disk: the boot disk; sync keeps no local folder.
    boot = resolve("async", "/gcs/b/ckpt", None, environ={}, ismount=no_mount)
    assert boot.mode == "async" and "boot disk" in boot.why and boot.local_dir is not None
    assert resolve("sync", "/gcs/b/ckpt", "/fast", environ={}, ismount=no_mount).mode == "sync"
    # Two checkpoint folders on one node never share their local steps.
    assert folder_for("/fast", "/gcs/b/run1") != folder_for("/fast", "/gcs/b/run2")


def _make_save(root: Path, step: int, files: dict[str, bytes]) -> Path:
    folder = checkpoint.folder(root, step)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def test_resume_reads_the_local_copy_only_when_it_is_the_same_save_whole(tmp_path):
    remote = _make_save(tmp_path / "remote", 4, {".metadata": b"save-A", "__0_0.distcp": b"x" * 10})
    same = tmp_path / "same"
    _make_save(same, 4, {".metadata": b"save-A", "__0_0.distcp": b"x" * 10})
    assert checkpoint.fastest_copy(remote, same) == same / "step_00000004"
    other = tmp_path / "other"
    _make_save(other, 4, {".metadata": b"save-B", "__0_0.distcp": b"x" * 10})  # another run's step 4
    short = tmp_path / "short"
    _make_save(short, 4, {".metadata": b"save-A", "__0_0.distcp": b"x" * 9})
    partial = tmp_path / "partial"
    _make_save(partial, 4, {"__0_0.distcp": b"x" * 10})  # DCP had not committed it locally
    for local in (other, short, partial, tmp_path / "none", None):
        assert checkpoint.fastest_copy(remote, local) == remote, local


class HeldUpload:
    """Holds the upload's first file copy until released, and says when it got there (no sleeping)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: Exception | None = None) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        real = checkpointer._copy

        def held(src: Path, dst: Path) -> None:
            self.reached.set()
            assert self.release.wait(60)
            if fail:
                raise fail
            real(src, dst)

        monkeypatch.setattr(checkpointer, "_copy", held)


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((64,), float(step))}, "train": {"step": step}}


def test_a_step_counts_once_uploaded_and_pruning_spares_the_upload_in_flight(tmp_path, monkeypatch):
    remote, local = tmp_path / "ckpt", tmp_path / "local"
    ckpt = Checkpointer(str(remote), CkptPlace("async", local, ""), rank=0, local_rank=0, keep=1,
                        device_type="cpu", dist_timeout=60)
    ckpt.save(1, lambda: _state(1))
    assert ckpt.wait() and [r.step for r in ckpt.collect()] == [1]
    held = HeldUpload(monkeypatch)
    state = _state(2)
    ckpt.save(2, lambda: state)
    state["model"]["w"].zero_()  # training goes on: the save holds its own copy
    assert held.reached.wait(60)
    # Complete on the local disk, not yet in --ckpt-dir: resume still takes step 1, and --ckpt-keep 1
    # has removed neither step 1 nor the step being uploaded.
    assert (local / "step_00000002" / ".metadata").is_file()
    assert checkpoint.latest(remote) == remote / "step_00000001"
    assert ckpt.collect() == [] and ckpt.pending and not ckpt.wait(timeout=0)
    held.release.set()
    assert ckpt.wait(60)
    (record,) = ckpt.collect()
    assert (record.step, record.mode) == (2, "async") and record.save_s >= record.upload_s > 0
    assert checkpoint.latest(remote) == remote / "step_00000002"
    assert sorted(p.name for p in remote.iterdir()) == ["step_00000002"]  # pruned in both places
    assert sorted(p.name for p in local.iterdir()) == ["step_00000002"]
    loaded = {"model": {"w": torch.zeros(64)}, "train": {"step": 0}}
    torch.distributed.checkpoint.load(loaded, checkpoint_id=remote / "step_00000002")
    assert torch.equal(loaded["model"]["w"], torch.full((64,), 2.0)) and loaded["train"]["step"] == 2


def test_a_failed_background_save_is_raised_in_the_training_thread(tmp_path, monkeypatch):
    ckpt = Checkpointer(str(tmp_path / "ckpt"), CkptPlace("async", tmp_path / "local", ""), rank=0, local_rank=0,
                        keep=2, device_type="cpu", dist_timeout=60)
    held = HeldUpload(monkeypatch, fail=OSError(28, "No space left on device"))
    ckpt.save(3, lambda: _state(3))
    held.release.set()
    with pytest.raises(RuntimeError, match="checkpoint of step 3: the background save failed: .*No space left"):
        ckpt.wait(60)


def test_after_a_sigterm_the_pending_upload_is_waited_for_only_until_the_grace_ends(tmp_path, monkeypatch, capsys):
    from gcpgpu.trainer.dist import DistEnv
    from gcpgpu.trainer.metrics import JsonLog
    from gcpgpu.trainer.summary import RunResult

    ckpt = Checkpointer(str(tmp_path / "ckpt"), CkptPlace("async", tmp_path / "local", ""), rank=0, local_rank=0,
                        keep=2, device_type="cpu", dist_timeout=60)
    held = HeldUpload(monkeypatch)
    ckpt.save(5, lambda: _state(5))
    stop = StopFlag()
    stop.at = -STOP_GRACE_S  # the SIGTERM came long ago: no grace left
    result = RunResult(stopped=True)
    cfg = TrainConfig(ckpt_dir=str(tmp_path / "ckpt"))
    _finish_saves(DistEnv(), cfg, ckpt, stop, JsonLog(None, False), result)
    assert result.ckpt_incomplete and "did not reach" in capsys.readouterr().out
    held.release.set()
    assert ckpt.wait(60)


@pytest.mark.multiprocess
def test_async_checkpoint_blocks_the_steps_a_quarter_of_a_sync_save_at_most(small_text, tmp_path):
    """One 2-process FSDP run saves at step 2 synchronously (the test hook) and at step 4 asynchronously: the
    same state on the same machine under the same load, each save's blocked and save times printed and
    logged by the trainer. --ckpt-dir is a local folder here, so the hook adds the latency of a bucket's
    write (2 s per rank per save) to both kinds of save alike: into the sync save's DCP write, and into
    the async save's upload."""
    pytest.importorskip("numpy", reason="multi-rank torch.distributed.checkpoint needs numpy")
    log = tmp_path / "log.jsonl"
    procs = run(2, [*TINY, "--data", str(small_text), "--steps", "4", "--parallel", "fsdp", "--ckpt-every", "2",
                    "--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-mode", "async",
                    "--ckpt-local-dir", str(tmp_path / "local"), "--log-json", str(log)],
                env={checkpointer.SYNC_SAVE_AT_ENV: "2", checkpoint.SLOW_CKPT_DIR_ENV: "2"})
    sync, done = read_log(log, "checkpoint")
    assert (sync["ckpt_step"], sync["mode"], done["ckpt_step"], done["mode"]) == (2, "sync", 4, "async")
    assert sync["blocked_s"] == sync["save_s"] >= 2
    assert done["blocked_s"] <= sync["save_s"] / 4, (done, sync)
    assert done["save_s"] >= done["upload_s"] >= 2  # the upload took its time, off the critical path
    for figure in (f"steps blocked {sync['blocked_s']:.3f} s", f"steps blocked {done['blocked_s']:.3f} s"):
        assert figure in procs[0].stdout
    (summary,) = read_log(log, "summary")
    assert summary["checkpoints"] == 2 and summary["ckpt_mode"] == "async"
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["step_00000002", "step_00000004"]


def test_on_a_gpu_one_pinned_host_copy_serves_every_save(tmp_path, monkeypatch):
    """On CUDA the state is staged into one pinned host copy, reused: each save still holds its own step's
    values (tensors copied in, numbers taken fresh). Pinning is the only part that needs a GPU."""
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self)
    remote = tmp_path / "ckpt"
    ckpt = Checkpointer(str(remote), CkptPlace("async", tmp_path / "local", ""), rank=0, local_rank=0, keep=2,
                        device_type="cuda", dist_timeout=60)
    cached = []
    for step in (1, 2):
        state = _state(step)
        ckpt.save(step, lambda state=state: state)
        state["model"]["w"].add_(100.0)  # training goes on
        cached.append(ckpt.stager.state_dict_cache["model"]["w"])
        assert ckpt.wait(60)
    assert cached[0] is cached[1]  # one host copy
    for step in (1, 2):
        loaded = {"model": {"w": torch.zeros(64)}, "train": {"step": 0}}
        torch.distributed.checkpoint.load(loaded, checkpoint_id=checkpoint.folder(remote, step))
        assert torch.equal(loaded["model"]["w"], torch.full((64,), float(step))) and loaded["train"]["step"] == step
