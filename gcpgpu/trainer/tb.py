"""TensorBoard scalars from rank 0, only where the tensorboard package is installed (an optional extra).

--tensorboard-dir, else Vertex's AIP_TENSORBOARD_LOG_DIR (a gs:// path, written through its /gcs/ mount).
"""

from __future__ import annotations

import os
from importlib.util import find_spec

from gcpgpu.trainer.config import ConfigError

# What a logged step's record (train.py) becomes, as TensorBoard tag: record key.
TAGS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm", "val/loss": "val_loss",
        "perf/tokens_per_s_per_gpu": "tokens_per_s", "perf/mfu": "mfu", "perf/step_time_s": "step_time_s",
        "memory/peak_gib": "peak_mem_gib"}


def tensorboard_dir(cfg_dir: str | None, environ: dict[str, str] | None = None) -> str | None:
    """--tensorboard-dir, else Vertex's AIP_TENSORBOARD_LOG_DIR read through its /gcs/ mount."""
    d = cfg_dir or (os.environ if environ is None else environ).get("AIP_TENSORBOARD_LOG_DIR")
    if not d:
        return None
    return "/gcs/" + d[len("gs://"):] if d.startswith("gs://") else d


def available() -> bool:
    return find_spec("tensorboard") is not None


def resolve(cfg_dir: str | None) -> tuple[str | None, str | None]:
    """(directory to write, or None; a note to print, or None). An explicit --tensorboard-dir without the
    package is an error; Vertex's variable without it only a note, since every Vertex job with a
    TensorBoard instance sets it."""
    path = tensorboard_dir(cfg_dir)
    if path is None or available():
        return path, None
    if cfg_dir:
        raise ConfigError("--tensorboard-dir: needs the tensorboard package (pip install 'gcpgpu[tensorboard]' "
                          "or tensorboard); install it or drop the option")
    return None, "AIP_TENSORBOARD_LOG_DIR is set but the tensorboard package is not installed: no TensorBoard scalars"


class Scalars:
    """A SummaryWriter on rank 0 when a directory is given; a no-op elsewhere."""

    def __init__(self, path: str | None, enabled: bool):
        self._w = None
        if path and enabled:
            from torch.utils.tensorboard import SummaryWriter

            self._w = SummaryWriter(log_dir=path)

    def write(self, step: int, record: dict) -> None:
        if self._w is None:
            return
        for tag, key in TAGS.items():
            value = record.get(key)
            if value is not None:
                self._w.add_scalar(tag, value, step)
        self._w.flush()  # a preempted job keeps what it logged

    def close(self) -> None:
        if self._w is not None:
            self._w.close()
            self._w = None
