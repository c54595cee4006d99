"""Validation loss (--eval-every/--eval-steps on a held-out tail) and TensorBoard scalars, in a 2-process gloo run."""

from __future__ import annotations

import json
import os
from importlib.util import find_spec

import pytest
from _trainer_helpers import REPO, TINY, run

torch = pytest.importorskip("torch")

from gcpgpu.trainer.data import TokenSource, split  # noqa: E402
from gcpgpu.trainer.evaluate import should_eval  # noqa: E402
from gcpgpu.trainer.tb import tensorboard_dir  # noqa: E402

needs_tensorboard = pytest.mark.skipif(find_spec("tensorboard") is None,
                                       reason="tensorboard is a dev dependency; not installed here")


def test_the_held_out_tail_is_never_drawn_for_training():
    src = TokenSource(torch.arange(10_000), 10_000, "counting")
    train, val = split(src, 0.01, seq_len=32)
    assert len(val.tokens) == 100 and len(train.tokens) == 9_900
    assert int(train.tokens.max()) < int(val.tokens.min())
    with pytest.raises(Exception, match="--val-fraction: 0.001 of 10,000 tokens leaves 10 for validation"):
        split(src, 0.001, seq_len=32)


def test_evaluations_happen_every_n_steps_and_after_the_last():
    assert [s for s in range(1, 11) if should_eval(s, 4, 10)] == [4, 8, 10]
    assert not any(should_eval(s, 0, 10) for s in range(1, 11))


def test_tensorboard_dir_defaults_to_vertexs_variable_through_the_gcs_mount():
    assert tensorboard_dir(None, {"AIP_TENSORBOARD_LOG_DIR": "gs://b/logs/tb"}) == "/gcs/b/logs/tb"
    assert tensorboard_dir("/tmp/mine", {"AIP_TENSORBOARD_LOG_DIR": "gs://b/x"}) == "/tmp/mine"
    assert tensorboard_dir(None, {}) is None


def test_asking_for_tensorboard_without_the_package_is_one_line(small_text, tmp_path):
    # tensorboard is a dev dependency, so the trainer runs through a launcher that hides it (a None entry in
    # sys.modules is Python's own "not importable": find_spec answers None, import raises ImportError).
    (tmp_path / "trainer_without_tensorboard.py").write_text(
        "import sys\nsys.modules['tensorboard'] = None\nfrom gcpgpu.trainer.__main__ import main\nsys.exit(main())\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    args = [*TINY, "--data", str(small_text), "--steps", "1"]
    [p] = run(1, [*args, "--tensorboard-dir", str(tmp_path / "tb")], module="trainer_without_tensorboard", env=env,
              check=False)
    assert p.returncode == 2 and p.stderr.strip() == (
        "gcpgpu.trainer: error: --tensorboard-dir: needs the tensorboard package (pip install "
        "'gcpgpu[tensorboard]' or tensorboard); install it or drop the option")
    assert not (tmp_path / "tb").exists()
    # Vertex's variable without the package is only a note: the run goes on.
    [p] = run(1, args, module="trainer_without_tensorboard", env={**env, "AIP_TENSORBOARD_LOG_DIR": str(tmp_path / "v")})
    assert "AIP_TENSORBOARD_LOG_DIR is set but the tensorboard package is not installed" in p.stdout + p.stderr


@pytest.mark.multiprocess
@needs_tensorboard
def test_two_ranks_write_validation_loss_and_tensorboard_events(small_text, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log, tb = tmp_path / "log.jsonl", tmp_path / "tb"
    procs = run(2, [*TINY, "--data", str(small_text), "--steps", "8", "--log-every", "3", "--eval-every", "4",
                    "--eval-steps", "2", "--log-json", str(log)], env={"AIP_TENSORBOARD_LOG_DIR": str(tb)})
    records = [json.loads(x) for x in log.read_text().splitlines()]
    steps = [r for r in records if r.get("kind") != "summary"]
    # Logged at 3 and 6 (every 3), at 4 and 8 (evaluations), and the last.
    assert [r["step"] for r in steps] == [2, 3, 5, 7]
    vals = {r["step"]: r["val_loss"] for r in steps}
    assert vals[2] is None and vals[5] is None
    assert 0 < vals[7] < vals[3] < 6  # the byte model learns the held-out text too
    summary = records[-1]
    assert summary["kind"] == "summary" and summary["val_loss"] == vals[7]
    assert f"validation loss {vals[7]:.4f}" in procs[0].stdout

    files = list(tb.glob("events.out.tfevents.*"))
    assert len(files) == 1  # rank 0 only
    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "val/loss", "train/lr", "perf/tokens_per_s_per_gpu", "memory/peak_gib"} <= tags
    assert [e.step for e in acc.Scalars("val/loss")] == [3, 7]
    assert acc.Scalars("val/loss")[-1].value == pytest.approx(vals[7], rel=1e-6)
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 3, 5, 7]
