"""The emulator's storage for job outputs (buckets and node disks) never reaches outside its root."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcpgpu.fakes.host.storage import PathRefused, Storage

# (what a job names, the folder of ROOT it must stay in: the buckets, or that node's own disk).
# Each climbs no further than this test's tmp_path if the emulator ever resolves it as a host path
# again, so a regression is caught without touching anything outside the test's folder.
HOSTILE = [("gs://bucket/../../x", "gcs"), ("gs://../../x/", "gcs"), ("gs://b/./..//../x", "gcs"),
           ("/gcs/b/../../x", "gcs"), ("{tmp}/w/../x", "nodes/4711"), ("../../x", "nodes/4711"),
           ("y/../../../x", "nodes/4711")]


@pytest.mark.parametrize(("value", "inside"), HOSTILE)
def test_a_path_that_climbs_stays_inside_its_bucket_or_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           value: str, inside: str) -> None:
    root = tmp_path / "root"
    cwd = tmp_path / "c1" / "c2"  # relative paths climb from here
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    value = value.replace("{tmp}", str(tmp_path))
    storage = Storage(root)
    base = (root / inside).resolve()
    env = storage.localize_env({"AIP_CHECKPOINT_DIR": value, "GCPGPU_OUTPUT_DIR": value}, "4711")
    for path in env.values():
        assert Path(path).resolve().is_relative_to(base), path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1", "root"]  # nothing made beside the root
    # The bundled trainer's own arguments climbing out are refused in one line, whichever form they take;
    # one that climbs within its top (the node's /: {tmp}/w/../x) lands on the node's disk.
    for args in (["--ckpt-dir", value], [f"--log-json={value}"], ["--data", value]):
        if args[0] == "--data" and not value.startswith(("gs://", "/gcs/")):
            continue  # what the trainer only reads may be this machine's
        if value.startswith("/") and inside != "gcs":
            mapped = storage.localize_args(args, "4711", cwd)[-1].removeprefix("--log-json=")
            assert Path(mapped).resolve().is_relative_to(base), mapped
            continue
        with pytest.raises(PathRefused, match=r"climbs out of"):
            storage.localize_args(args, "4711", cwd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1", "root"]


def test_buckets_are_shared_and_node_paths_are_per_node(tmp_path: Path) -> None:
    storage = Storage(tmp_path)
    assert storage.local("gs://b/runs/exp1/", "1") == f"{tmp_path}/gcs/b/runs/exp1/"
    assert storage.local("/gcs/b/runs/exp1", "2") == f"{tmp_path}/gcs/b/runs/exp1"
    assert storage.local("/mnt/shared//runs/./exp1", "1") == f"{tmp_path}/nodes/1/mnt/shared/runs/exp1"
    assert storage.local("/mnt/x", "2") == f"{tmp_path}/nodes/2/mnt/x"


def _planted(tmp_path: Path) -> tuple[Storage, Path]:
    """A storage whose bucket `bkt` holds `evil`, a link a job planted to a folder of this machine."""
    storage = Storage(tmp_path / "root")
    host = tmp_path / "host"
    host.mkdir()
    (tmp_path / "root" / "gcs" / "bkt").mkdir(parents=True)
    (tmp_path / "root" / "gcs" / "bkt" / "evil").symlink_to(host)
    (tmp_path / "root" / "gcs" / "bkt" / "fine").symlink_to("other")  # a link that stays in the bucket is followed
    return storage, host


@pytest.mark.parametrize("value", ["gs://bkt/evil", "gs://bkt/evil/ckpt/", "/gcs/bkt/evil/x"])
def test_a_link_planted_in_a_bucket_never_leads_a_job_outside_the_storage(tmp_path: Path, value: str) -> None:
    storage, host = _planted(tmp_path)
    with pytest.raises(PathRefused, match="leads out of the emulator's storage"):
        storage.local(value, "1")
    with pytest.raises(PathRefused):
        storage.localize_env({"AIP_CHECKPOINT_DIR": value}, "1")
    for args in (["--ckpt-dir", value], ["--data", value], [f"--tensorboard-dir={value}"]):
        with pytest.raises(PathRefused):
            storage.localize_args(args, "1", tmp_path)
    assert list(host.iterdir()) == []  # nothing made or written there
    assert storage.local("gs://bkt/fine/x", "1") == str(tmp_path / "root" / "gcs" / "bkt" / "other" / "x")


def test_a_link_on_a_nodes_disk_or_in_the_working_folder_leads_nowhere_else(tmp_path: Path) -> None:
    storage, host = _planted(tmp_path)
    disk = tmp_path / "root" / "nodes" / "1"
    disk.mkdir(parents=True)
    (disk / "mnt").symlink_to(host)
    with pytest.raises(PathRefused):
        storage.localize_args(["--ckpt-dir", "/mnt/ck"], "1", tmp_path)
    cwd = tmp_path / "run"
    cwd.mkdir()
    (cwd / "out").symlink_to(host)
    with pytest.raises(PathRefused):
        storage.localize_args(["--log-json", "out/m.jsonl"], "1", cwd)
    assert list(host.iterdir()) == []


def test_the_bundled_trainers_output_paths_land_on_the_nodes_own_disk(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "root")
    disk = tmp_path / "root" / "nodes" / "7"
    args = storage.localize_args(["--ckpt-dir", "/home/me/ck", "--log-json=/tmp/m.jsonl", "--tensorboard-dir",
                                  "/var/tb", "--profile-dir=/p", "--steps", "4", "--data", "/data/train.bin",
                                  "--run-name", "x"], "7", tmp_path)
    assert args == ["--ckpt-dir", f"{disk}/home/me/ck", f"--log-json={disk}/tmp/m.jsonl", "--tensorboard-dir",
                    f"{disk}/var/tb", f"--profile-dir={disk}/p", "--steps", "4", "--data", "/data/train.bin",
                    "--run-name", "x"]  # what it only reads stays as given
    # Relative: the run's own folder, its working directory, unless it climbs out of it.
    assert storage.localize_args(["--log-json", "m.jsonl"], "7", tmp_path) == ["--log-json", "m.jsonl"]
    with pytest.raises(PathRefused, match="--log-json '../m.jsonl': its '..' climbs out of the job's working folder"):
        storage.localize_args(["--log-json", "../m.jsonl"], "7", tmp_path)


@pytest.mark.parametrize("name", ["c.json", "c.yaml"])
def test_paths_a_config_file_gives_are_mapped_as_flags_which_win_over_it(tmp_path: Path, name: str) -> None:
    storage = Storage(tmp_path / "root")
    disk = tmp_path / "root" / "nodes" / "7"
    config = tmp_path / name
    config.write_text('{"ckpt_dir": "/home/me/ck", "log-json": "/tmp/m.jsonl", "steps": 4}')  # JSON is YAML too
    args = storage.localize_args(["--config", str(config)], "7", tmp_path)
    assert args == ["--config", str(config), "--ckpt-dir", f"{disk}/home/me/ck", "--log-json", f"{disk}/tmp/m.jsonl"]
    args = storage.localize_args(["--config", name, "--ckpt-dir", "gs://b/ck"], "7", tmp_path)  # relative: the cwd's
    assert args == ["--config", name, "--ckpt-dir", f"{tmp_path}/root/gcs/b/ck", "--log-json", f"{disk}/tmp/m.jsonl"]
    config.write_text('{"ckpt_dir": "/x/../../etc"}')
    with pytest.raises(PathRefused, match=r"--ckpt-dir \(in .*\) '/x/../../etc': its '..' climbs out of /"):
        storage.localize_args(["--config", str(config)], "7", tmp_path)


def test_a_config_file_the_emulator_cannot_read_safely_refuses_the_job(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "root")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x]\nb: &b [*a, *a]\nckpt_dir: /etc\n")
    with pytest.raises(PathRefused, match="no YAML aliases"):
        storage.localize_args(["--config", str(bomb)], "7", tmp_path)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(PathRefused, match="over"):
        storage.localize_args(["--config", str(big)], "7", tmp_path)
    assert storage.localize_args(["--config", str(tmp_path / "absent.json")], "7", tmp_path) == \
        ["--config", str(tmp_path / "absent.json")]  # the trainer says so itself


@pytest.mark.parametrize("how", ["env", "args"])
def test_a_link_swapped_in_after_the_check_is_refused_at_use_never_made_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Issue 49: a path checked once was used later: a job that swaps a folder on its way for a link between
    the check and the folder's making (here right after the check, as a racing job would) had the emulator
    make the trainer's folders on this machine's disk."""
    from gcpgpu.fakes.host import storage as module

    store = Storage(tmp_path / "root")
    host = tmp_path / "host"
    host.mkdir()
    run = tmp_path / "root" / "gcs" / "bkt" / "run"
    run.mkdir(parents=True)
    checked = module._kept_under

    def then_swapped(base: Path, path: Path, value: str) -> Path:
        real = checked(base, path, value)
        if run.is_dir() and not run.is_symlink():
            run.rmdir()
            run.symlink_to(host)  # the racing job's move
        return real

    monkeypatch.setattr(module, "_kept_under", then_swapped)
    with pytest.raises(PathRefused, match="'run' on its way is a link or a file now"):
        if how == "env":
            store.localize_env({"AIP_CHECKPOINT_DIR": "gs://bkt/run/ckpt/"}, "1")
        else:
            store.localize_args(["--ckpt-dir", "gs://bkt/run/ckpt/x"], "1", tmp_path)
    assert list(host.iterdir()) == []  # nothing made there
