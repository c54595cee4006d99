"""Checkpoints off the training's critical path (--ckpt-mode async), or on it (sync): what train() calls.

async, at a checkpoint step: every rank copies its state into host memory (DCP's staging, the only
part the steps wait for) and trains on. In the background DCP writes that copy into the local folder
(ckpt_local.py) and a thread per rank uploads it to --ckpt-dir: each rank its own shard files, then,
once every rank's are there, rank 0 the `.metadata` that makes the step complete (as `.metadata.tmp`
renamed, the way DCP writes it). A step complete in the local folder but not in --ckpt-dir does not
count: resume takes the newest step complete in --ckpt-dir and reads the local copy of it only when
that is the same save, whole (checkpoint.fastest_copy).

One save is in flight at a time: a checkpoint first waits for the previous one's upload, and that
wait counts as blocked. The background threads talk over a gloo group of their own: two threads'
collectives on one group could be paired across ranks in different orders. --ckpt-keep prunes both
places after an upload, so the step being uploaded is never removed. On SIGTERM, finish() waits for
the pending save up to a deadline, so the preemption's checkpoint is complete.

Each save's figures (SaveRecord): blocked_s, how long the steps waited for it (waited_s of that for the
previous save), and save_s, from its start until it was complete in --ckpt-dir; async also local_s (DCP's
local write done) and upload_s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from gcpgpu.trainer import checkpoint, nofollow
from gcpgpu.trainer.ckpt_local import CkptPlace
from gcpgpu.trainer.ckpt_rule import copy_file as _copy

# Test hook: "STEP" makes rank 0 die abruptly (os._exit) in the upload of that step, after its shard files
# reached --ckpt-dir and before `.metadata` did: a run killed while the background upload is half done.
DIE_IN_UPLOAD_ENV = "GCPGPU_TRAINER_TEST_DIE_IN_UPLOAD"
# Test hook: "STEP" makes that save synchronous in an async run: both kinds of save of one state, one run.
SYNC_SAVE_AT_ENV = "GCPGPU_TRAINER_TEST_SYNC_SAVE_AT"


@dataclass
class SaveRecord:
    """One checkpoint, once complete in --ckpt-dir."""

    step: int
    mode: str
    path: str
    blocked_s: float
    save_s: float
    waited_s: float = 0.0  # of blocked_s: waiting for the previous save's upload
    local_s: float | None = None
    upload_s: float | None = None

    def line(self) -> str:
        parts = f" (local write {self.local_s:.2f} s, upload {self.upload_s:.2f} s)" if self.mode == "async" else ""
        waited = (f", {self.waited_s:.3f} s of it waiting for the previous upload: checkpoints come faster than "
                  "they upload" if self.waited_s >= 0.001 else "")
        return (f"saved checkpoint {self.path} ({self.mode}) in {self.save_s:.2f} s{parts}; "
                f"steps blocked {self.blocked_s:.3f} s{waited}")

    def log(self) -> dict[str, Any]:
        """The --log-json record (no "step" key: it arrives after later steps' records)."""
        return {"kind": "checkpoint", "ckpt_step": self.step, "mode": self.mode, "path": self.path,
                "blocked_s": self.blocked_s, "waited_s": self.waited_s, "save_s": self.save_s, "local_s": self.local_s,
                "upload_s": self.upload_s}


@dataclass
class _Pending:
    step: int
    started: float
    blocked_s: float = 0.0
    waited_s: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)
    record: SaveRecord | None = None
    error: BaseException | None = None


class Checkpointer:
    """Saves (a collective: every rank calls save() at the same steps) and reports the finished ones."""

    def __init__(self, ckpt_dir: str, place: CkptPlace, *, rank: int, local_rank: int, keep: int,
                 device_type: str, dist_timeout: float) -> None:
        self.root, self.place, self.mode = Path(ckpt_dir), place, place.mode
        checkpoint.pin(self.root, place.local_dir if self.mode == "async" else None)  # the links now are the user's
        self.rank, self.local_rank, self.keep = rank, local_rank, keep
        self.group = None
        self.stager = None
        self._pending: _Pending | None = None
        self._done: list[SaveRecord] = []
        if self.mode == "async":
            if dist.is_initialized():  # a collective: every rank builds its Checkpointer at the same point
                self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=dist_timeout))
            if device_type == "cuda":
                from torch.distributed.checkpoint.staging import BlockingAsyncStager

                # One pinned host copy of this rank's state, reused by every save: fast device-to-host copies.
                self.stager = BlockingAsyncStager(cache_staged_state_dict=True)

    def save(self, step: int, make_state: Callable[[], dict[str, Any]]) -> float:
        """Save the state after `step` steps (make_state: checkpoint.state_dict for this step); returns how long
        the steps were blocked."""
        t0 = time.perf_counter()
        self.wait()  # one save in flight: the previous upload first
        waited = time.perf_counter() - t0
        state = make_state()
        if self.mode == "sync" or os.environ.get(SYNC_SAVE_AT_ENV) == str(step):
            path = checkpoint.save(self.root, step, state, rank=self.rank, keep=self.keep)
            took = time.perf_counter() - t0
            self._done.append(SaveRecord(step, "sync", str(path), took, took, waited))
            return took
        local = checkpoint.folder(self.place.local_dir, step)
        if self.local_rank == 0:
            checkpoint.remove(local)  # a copy of this step a killed run left
        checkpoint.barrier()
        # The local folder is written through its descriptor, held until the upload is done (nofollow.py).
        fd = nofollow.open_dir(local, create=True)
        kwargs = {"async_stager": self.stager} if self.stager is not None else {}
        try:
            # Returns once the state is copied to host memory (FileSystemWriter is DCP's blocking stager).
            future = dcp.async_save(state, storage_writer=checkpoint.writer(nofollow.through(fd, local), step),
                                    process_group=self.group, no_dist=not dist.is_initialized(), **kwargs)
        except BaseException:
            os.close(fd)
            raise
        self._pending = _Pending(step, t0, blocked_s=time.perf_counter() - t0, waited_s=waited)
        threading.Thread(target=self._background, args=(self._pending, future, local, fd), daemon=True,
                         name=f"gcpgpu-ckpt-{step}").start()
        return self._pending.blocked_s

    def _background(self, p: _Pending, future, local: Path, fd: int) -> None:
        try:
            future.result()  # DCP wrote every rank's shards and then `.metadata` into the local folders
            t_local = time.perf_counter()
            mine = nofollow.through(fd, local)
            remote = checkpoint.folder(self.root, p.step)
            if self.rank == 0:
                checkpoint.remove(remote)  # a half upload of this step by a run that was killed
            checkpoint.barrier(self.group)
            with nofollow.opened(remote, create=True) as (_fd, there):  # following no link swapped in
                time.sleep(checkpoint.slow_ckpt_dir_s())  # test hook: the emulated bucket's latency
                for f in sorted(mine.glob(f"__{self.rank}_*")):  # DCP names this rank's files __RANK_N.distcp
                    _copy(f, there / f.name)
                if self.rank == 0 and os.environ.get(DIE_IN_UPLOAD_ENV) == str(p.step):
                    os._exit(3)  # shards uploaded, `.metadata` not: half an upload
                checkpoint.barrier(self.group)  # every rank's shards are in --ckpt-dir
                if self.rank == 0:
                    _copy(mine / checkpoint.COMMIT, there / (checkpoint.COMMIT + ".tmp"))
                    os.replace(there / (checkpoint.COMMIT + ".tmp"), there / checkpoint.COMMIT)  # the commit
            if self.rank == 0:
                checkpoint.prune(self.root, self.keep, just_saved=remote)
            if self.local_rank == 0:
                checkpoint.prune(local.parent, self.keep, just_saved=local)
            now = time.perf_counter()
            p.record = SaveRecord(p.step, "async", str(remote), p.blocked_s, now - p.started, p.waited_s,
                                  local_s=t_local - p.started, upload_s=now - t_local)
        except BaseException as e:  # noqa: BLE001 - handed to the training thread, which raises it
            p.error = e
        finally:
            os.close(fd)
            p.done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the save in flight (up to timeout seconds); False if it is still running."""
        p = self._pending
        if p is None:
            return True
        if not p.done.wait(timeout):
            return False
        self._pending = None
        if p.error is not None:
            raise RuntimeError(f"checkpoint of step {p.step}: the background save failed: {p.error}") from p.error
        self._done.append(p.record)
        return True

    def collect(self) -> list[SaveRecord]:
        """The saves completed since the last call (a finished background save is noticed here)."""
        if self._pending is not None and self._pending.done.is_set():
            self.wait()
        done, self._done = self._done, []
        return done

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def close(self) -> None:
        if self.stager is not None:
            self.stager.close()

