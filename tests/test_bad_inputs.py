"""Every bad input is refused before the first API call: exit 2, one line naming the field, no request.

One table across the commands that reach the cloud (cluster up/plan/down/status, job submit) and
their spec files, hostile ones included (alias bombs, /dev/zero, a FIFO, huge values, paths that
climb out of a bucket, undecodable bytes). Each row runs the real CLI in a child process against
the emulator, under an address-space limit and a timeout, and reads the emulator's request log. The
children are forked from one process per module that has imported the CLI once (tests/cli_forks.py), so
the table pays that import once rather than once a row.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_forks import CliForks

P = ["--project", "test-proj"]
UP = [*P, "cluster", "up", "--yes"]
OK = ["c", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a"]
SUBMIT = [*P, "--region", "us-central1", "job", "submit"]
VERTEX = [*SUBMIT, "--vertex", "--machine-type", "a3-highgpu-8g"]

CLUSTER_JOB = [*SUBMIT, "--cluster", "c", "--image", "busybox"]
MEMORY_LIMIT = 512 * 2**20  # bytes of address space: the CLI needs under 100 MB for any refusal
TIME_LIMIT_S = 60  # a hang guard, far above the second a refusal takes


def _bomb(field: str, head: str = "vertex: true\nmachine_type: a3-highgpu-8g\n", mapping: bool = False) -> str:
    """The issue's 405-byte YAML alias bomb (9^9 strings once expanded) under `field`: a list of
    lists, or a mapping of lists."""
    names = "abcdefghi"
    item = "  {n}: &{n} [{v}]" if mapping else "  - &{n} [{v}]"
    lines = [head + f"{field}:", item.format(n="a", v=", ".join(["l"] * 9))]
    lines += [item.format(n=n, v=", ".join(["*" + p] * 9)) for p, n in zip(names, names[1:], strict=False)]
    return "\n".join(lines) + "\n"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder_with_ignore(name: str, text: bytes = b"*.log\n", size: int = 0) -> Callable[[Path], None]:
    """A --workdir folder (train.py) whose ignore file `name` holds `text`, made `size` bytes long (sparse)."""

    def make(path: Path) -> None:
        path.mkdir()
        (path / "train.py").write_text("x = 1\n")
        with (path / name).open("wb") as f:
            f.write(text)
            f.truncate(max(size, len(text)))

    return make


def _sparse_200mb(path: Path) -> None:
    with path.open("wb") as f:
        f.write(b"name: c\n")
        f.truncate(200 * 2**20)


Content = str | bytes | Callable[[Path], None]

# (id, argv, {file name: contents (str, bytes, or a function that makes the file)}, text the one line must contain)
CASES: list[tuple[str, list[str], dict[str, Content], str]] = [
    # -- project ids by GCP's rules, and empty global options
    ("project-too-short", ["--project", "ab", "cluster", "up", "--yes", *OK], {}, "--project 'ab'"),
    ("project-too-long", ["--project", "a" * 31, "cluster", "up", "--yes", *OK], {}, "30"),
    ("project-uppercase", ["--project", "My-Project", "cluster", "up", "--yes", *OK], {}, "lowercase letter"),
    ("project-digit-first", ["--project", "1project", "cluster", "up", "--yes", *OK], {}, "--project '1project'"),
    ("project-trailing-hyphen", ["--project", "project-", "cluster", "up", "--yes", *OK], {}, "hyphen"),
    ("project-underscore", ["--project", "my_project", "cluster", "up", "--yes", *OK], {}, "lowercase letters"),
    ("project-empty", ["--project", "", "cluster", "up", "--yes", *OK], {}, "--project is empty"),
    ("project-bad-down", ["--project", "x", "cluster", "down", "c", "--yes"], {}, "--project 'x'"),
    ("project-bad-status", ["--project", "Bad!", "cluster", "status", "c"], {}, "--project 'Bad!'"),
    ("project-bad-list", ["--project", "no", "cluster", "list"], {}, "--project 'no'"),
    ("project-bad-vertex", ["--project", "UPPER-CASE", "--region", "us-central1", "job", "submit", "--vertex",
                            "--machine-type", "a3-highgpu-8g"], {}, "--project"),
    ("global-region-empty", [*P, "--region", "", "cluster", "up", "--yes", *OK], {}, "--region is empty"),
    ("global-zone-empty", [*P, "--zone", " ", "cluster", "status", "c"], {}, "--zone is empty"),
    # -- zone against region, in every combination of global and command flags
    # (a command's own --zone/--region replace the global ones: tests/test_cli_first_hour.py)
    ("zone-outside-region", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--region", "us-central1",
                             "--zone", "europe-west4-b"], {}, "--zone europe-west4-b is in europe-west4, not in --region us-central1"),
    ("global-flags-disagree", [*P, "--region", "us-east4", "--zone", "us-central1-a", "cluster", "status", "c"], {},
     "--zone us-central1-a"),
    ("zones-outside-region", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--region", "us-central1",
                              "--zones", "us-central1-a,us-east4-a"], {}, "--zones us-east4-a is in us-east4"),
    ("zone-and-zones", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a",
                        "--zones", "us-central1-b"], {}, "--zones"),
    ("zone-unknown", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--zone", "mars-north1-a"], {},
     "see 'gcpgpu catalog zones'"),
    ("zones-unknown", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--zones", "us-central1-a,mars-north1-a"], {},
     "--zones 'mars-north1-a'"),
    ("region-unknown", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--region", "mars-north1"], {}, "--region"),
    ("zone-twice", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--zones", "us-central1-a,us-central1-a"], {},
     "--zones"),
    # -- empty values of command options
    ("flex-start-empty", [*UP, *OK, "--flex-start", ""], {}, "--flex-start is empty"),
    ("zone-empty", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--zone", ""], {}, "--zone is empty"),
    ("region-empty", [*UP, "c", "--machine-type", "a3-highgpu-8g", "--region", ""], {}, "--region is empty"),
    ("machine-type-empty", [*UP, "c", "--machine-type", "", "--zone", "us-central1-a"], {}, "--machine-type is empty"),
    ("reservation-empty", [*UP, *OK, "--reservation", ""], {}, "--reservation is empty"),
    ("image-empty", [*UP, *OK, "--image", ""], {}, "--image is empty"),
    ("network-empty", [*UP, *OK, "--network", " "], {}, "--network is empty"),
    ("service-account-empty", [*UP, *OK, "--service-account", ""], {}, "--service-account is empty"),
    ("label-empty", [*UP, *OK, "--label", ""], {}, "--label is empty"),
    ("name-empty-up", [*UP, "", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a"], {}, "NAME is empty"),
    ("name-empty-down", [*P, "cluster", "down", "", "--yes"], {}, "NAME is empty"),
    ("plan-zone-empty", [*P, "cluster", "plan", "c", "--machine-type", "a3-highgpu-8g", "--zone", ""], {},
     "--zone is empty"),
    ("job-timeout-empty", [*VERTEX, "--timeout", ""], {}, "--timeout is empty"),
    ("job-max-wait-empty", [*VERTEX, "--flex-start", "--max-wait", ""], {}, "--max-wait is empty"),
    ("job-cluster-empty", [*SUBMIT, "--cluster", ""], {}, "--cluster is empty"),
    ("job-image-empty", [*VERTEX, "--image", ""], {}, "--image is empty"),
    ("job-command-empty", [*VERTEX, "--command", " "], {}, "--command is empty"),
    ("job-env-empty", [*VERTEX, "--env", ""], {}, "--env is empty"),
    # -- values out of range or of the wrong shape
    ("nodes-zero", [*UP, *OK, "--nodes", "0"], {}, "--nodes"),
    ("nodes-negative", [*UP, *OK, "--nodes", "-3"], {}, "--nodes"),
    ("nodes-too-many", [*UP, *OK, "--nodes", "5000"], {}, "--nodes"),
    ("flex-start-bad", [*UP, *OK, "--flex-start", "soon"], {}, "--flex-start"),
    ("flex-start-short", [*UP, *OK, "--flex-start", "1m", "--no-placement"], {}, "--flex-start"),
    ("spot-and-flex", [*UP, *OK, "--spot", "--flex-start", "2h"], {}, "--spot"),
    ("flex-wait-alone", [*UP, *OK, "--flex-wait", "1h"], {}, "add --flex-start DURATION"),
    ("flex-wait-too-long", [*UP, *OK, "--flex-start", "4h", "--flex-wait", "3h"], {}, "between 90s and 2h"),
    ("file-max-run-too-short", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nmax_run_duration: 10s\n"},
     "between 30s and 120d"),
    ("file-agent-image-bad", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nautostop: 30m\n"
                "agent_image: gcpgpu trainer\n"}, "agent_image 'gcpgpu trainer' must be a container image"),
    ("file-termination-action-bad", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nmax_run_duration: 2h\n"
                "termination_action: suspend\n"}, "--termination-action 'suspend'"),
    ("max-run-too-short", [*UP, *OK, "--max-run-duration", "29s"], {}, "--max-run-duration 29s is out of range"),
    ("max-run-too-long", [*UP, *OK, "--max-run-duration", "121d"], {}, "--max-run-duration 121d"),
    ("max-run-bad", [*UP, *OK, "--max-run-duration", "a day"], {}, "--max-run-duration 'a day'"),
    ("max-run-empty", [*UP, *OK, "--max-run-duration", ""], {}, "--max-run-duration is empty"),
    ("termination-action-alone", [*UP, *OK, "--termination-action", "stop"], {},
     "--termination-action needs --max-run-duration"),
    ("termination-action-bad", [*UP, *OK, "--max-run-duration", "1h", "--termination-action", "hibernate"], {},
     "must be delete or stop"),
    ("max-run-and-flex", [*UP, *OK, "--flex-start", "2h", "--max-run-duration", "1h"], {}, "--max-run-duration and"),
    ("machine-unknown", [*UP, "c", "--machine-type", "a9-hugegpu-8g", "--zone", "us-central1-a"], {},
     "a9-hugegpu-8g"),
    ("name-uppercase", [*UP, "Cluster", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a"], {}, "NAME"),
    ("name-bad-down", [*P, "cluster", "down", "My_Cluster", "--yes"], {}, "NAME 'My_Cluster'"),
    ("name-bad-status", [*P, "cluster", "status", "bad-"], {}, "NAME 'bad-'"),
    ("label-no-equals", [*UP, *OK, "--label", "team"], {}, "--label"),
    ("label-bad-key", [*UP, *OK, "--label", "Team=x"], {}, "--label"),
    ("boot-disk-small", [*UP, *OK, "--boot-disk-gb", "5"], {}, "--boot-disk-gb"),
    ("gpus-mismatch", [*UP, *OK, "--gpus", "4"], {}, "--gpus"),
    ("reservation-and-create", [*UP, *OK, "--reservation", "r", "--create-reservation"], {}, "--reservation"),
    ("spot-reservation", [*UP, *OK, "--spot", "--reservation", "r"], {}, "--spot"),
    ("service-account-bad", [*UP, *OK, "--service-account", "nobody"], {}, "--service-account"),
    ("emulator-bad", ["--emulator", "nowhere", *P, "cluster", "status", "c"], {}, "--emulator"),
    ("job-no-target", [*SUBMIT], {}, "--vertex"),
    ("job-vertex-and-cluster", [*SUBMIT, "--vertex", "--cluster", "c"], {}, "--vertex and --cluster"),
    ("job-nodes-zero", [*VERTEX, "--nodes", "0"], {}, "--nodes"),
    ("job-timeout-bad", [*VERTEX, "--timeout", "forever"], {}, "--timeout"),
    ("job-env-bad", [*VERTEX, "--env", "1BAD=x"], {}, "--env"),
    # -- cluster spec files: wrong YAML types, undecodable bytes, empty or unknown keys
    ("file-name-list", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "name: [a, b]\nmachine_type: a3-highgpu-8g\n"},
     "name is a list"),
    ("file-machine-type-map", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "name: c\nmachine_type: {a: 1}\n"},
     "machine_type is a mapping"),
    ("file-nodes-string", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nnodes: four\n"}, "nodes is 'four'"),
    ("file-nodes-bool", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nnodes: true\n"}, "nodes is True"),
    ("file-nodes-float", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nnodes: 2.5\n"}, "whole number"),
    ("file-zones-map", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: {a: b}\n"}, "zones is a mapping"),
    ("file-zones-ints", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: [1, 2]\n"}, "list of strings"),
    ("file-labels-list", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nlabels: [a]\n"}, "labels is a list"),
    ("file-external-ip-string", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nexternal_ips: 'no'\n"},
     "true or false"),
    ("file-region-list", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nregion: [us-central1]\n"}, "region is a list"),
    ("file-image-empty", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nimage: ''\n"}, "image is empty"),
    ("file-flex-start-empty", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nflex_start: ''\n"}, "flex_start"),
    ("file-flex-start-list", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nflex_start: [2h]\n"}, "flex_start"),
    ("file-not-utf8", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": b"name: c\nmachine_type: \xff\xfe\n"}, "not UTF-8"),
    ("file-latin1", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "name: caf\u00e9\n".encode("latin-1")}, "not UTF-8"),
    ("file-empty", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": ""}, "empty"),
    ("file-a-list", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "- name: c\n"}, "expected a mapping"),
    ("file-bad-yaml", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "name: [c\n"}, "not valid YAML"),
    ("file-unknown-key", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "name: c\nmachine: a3\n"}, "unknown field 'machine'"),
    ("file-boot-disk-string", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nboot_disk_gb: big\n"}, "boot_disk_gb"),
    ("plan-file-list", [*P, "cluster", "plan", "-f", "{d}/c.yaml"], {"c.yaml": "name: c\nmachine_type: [x]\n"},
     "machine_type is a list"),
    # -- job spec files
    ("job-file-name-list", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "vertex: true\nname: [a]\n"}, "name is a list"),
    ("job-file-machine-map", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "vertex: true\nmachine_type: {a: b}\n"},
     "machine_type is a mapping"),
    ("job-file-profile-string", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\nprofile: 'no'\n"}, "true or false"),
    ("job-file-env-list", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\nenv: 3\n"}, "env"),
    ("job-file-not-utf8", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": b"vertex: true\nname: \x80\x81\n"}, "not UTF-8"),
    ("job-file-image-empty", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\nimage: ' '\n"}, "image is empty"),
    ("job-file-timeout-list", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\ntimeout: [1h]\n"}, "timeout"),
    ("job-file-restart-int", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\nrestart: 3\n"}, "restart"),
    # -- spec files that would cost unbounded memory or time (issue 23, item 1)
    ("job-file-alias-bomb-args", [*SUBMIT, "-f", "{d}/j.yaml", "--dry-run"],
     {"j.yaml": _bomb("args", "cluster: c1\n")}, "YAML alias *a"),
    ("job-file-alias-bomb-command", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": _bomb("command")}, "YAML alias"),
    ("job-file-alias-bomb-env", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": _bomb("env", mapping=True)}, "YAML alias"),
    ("file-alias-merge-key", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "labels: &l {team: ml}\nname: c\nmachine_type: a3-highgpu-8g\n<<: {labels: *l}\n"}, "YAML alias *l"),
    ("job-file-dev-zero", [*SUBMIT, "-f", "/dev/zero", "--dry-run"], {}, "-f /dev/zero: is a device"),
    ("job-file-fifo", [*SUBMIT, "-f", "{d}/fifo", "--dry-run"], {"fifo": _fifo}, "is a named pipe"),
    ("file-200mb", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": _sparse_200mb}, "larger than 256 KiB"),
    ("job-file-300kb", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "vertex: true\n" + "# pad\n" * 50_000},
     "larger than 256 KiB"),
    ("job-file-long-value", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\nimage: " + "a" * 200_000 + "\n"},
     "image is 200000 characters long"),
    ("job-file-long-env-value", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\nenv:\n  K: " + "v" * 5000 + "\n"},
     "env.K is 5000 characters long"),
    ("file-long-key", [*UP, "-f", "{d}/c.yaml"], {"c.yaml": "? " + "k" * 5000 + "\n: 1\n"}, "a key is 5000 characters"),
    ("job-file-many-args", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nargs: [" + ", ".join(["x"] * 5000) + "]\n"}, "list or mapping of more than 1000 entries"),
    ("job-file-many-values", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "args: [" + ",".join("[" + ",".join(["a"] * 900) + "]" for _ in range(140)) + "]\n"},
     "past 5000 values"),
    ("job-file-deep-nesting", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "args: " + "[" * 100_000 + "\n"},
     "nests lists or mappings"),
    ("job-file-huge-int", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "vertex: true\nnodes: " + "9" * 5000 + "\n"},
     "a value cannot be read"),
    ("flag-too-long", [*UP, *OK, "--image", "a" * 100_000], {}, "--image is 100000 characters long"),
    ("job-arg-too-long", [*CLUSTER_JOB, "--", "x" * 5000], {}, "TRAINER_ARGS (argument 1) is 5000 characters"),
    # -- output folders that climb out of their bucket or folder (item 4)
    ("job-output-dir-dotdot", [*VERTEX, "--output-dir", "gs://bucket/../../x"], {}, "'..'"),
    ("job-output-dir-dotdot-cluster", [*CLUSTER_JOB, "--output-dir", "gs://bucket/../../x"], {}, "'..'"),
    ("job-output-dir-dot", [*VERTEX, "--output-dir", "gs://bucket/./x"], {}, "'.'"),
    ("job-output-dir-empty-segment", [*VERTEX, "--output-dir", "gs://bucket//x"], {}, "empty ('//')"),
    ("job-output-dir-node-dotdot", [*CLUSTER_JOB, "--output-dir", "/mnt/shared/../../etc"], {}, "'..'"),
    ("job-output-dir-bucket", [*VERTEX, "--output-dir", "gs://../x"], {}, "is not a bucket name"),
    ("job-output-dir-newline", [*VERTEX, "--output-dir", "gs://bucket/a\nb"], {}, "control characters"),
    ("job-file-output-dir-dotdot", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\noutput_dir: gs://b-1/runs/../../../x\n"}, "'..'"),
    # -- values Compute, Vertex or docker would take as something else (item 5)
    ("image-not-image-path", [*UP, *OK, "--image", "foo/global/images/x"], {}, "--image 'foo/global/images/x'"),
    ("image-shell", [*UP, *OK, "--image", "projects/p-1234/global/images/x;reboot"], {}, "--image"),
    ("network-command-substitution", [*UP, *OK, "--network", "networks/$(id)/default"], {}, "--network"),
    ("network-path", [*UP, *OK, "--network", "projects/other-proj/global/networks/default"], {}, "--network"),
    ("subnetwork-path", [*UP, *OK, "--subnetwork", "a/b"], {}, "--subnetwork 'a/b'"),
    ("service-account-not-google", [*UP, *OK, "--service-account", "me@example.com"], {}, "--service-account"),
    ("scope-alias", [*UP, *OK, "--scope", "cloud-platform"], {}, "--scope 'cloud-platform'"),
    ("scope-other-host", [*UP, *OK, "--scope", "https://evil.example/auth/cloud-platform"], {}, "--scope"),
    ("file-network-path", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nnetwork: global/networks/$(x)\n"},
     "--network"),
    ("file-scopes-bad", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nscopes: [all]\n"}, "--scope 'all'"),
    ("job-image-shell", [*VERTEX, "--image", "busybox;reboot"], {}, "--image 'busybox;reboot'"),
    ("job-image-uppercase", [*VERTEX, "--image", "Registry.io/Team/Img"], {}, "--image"),
    ("job-image-option", [*CLUSTER_JOB[:-2], "--image", "--privileged"], {}, "--image"),
    ("job-service-account-bad", [*VERTEX, "--service-account", "x@y.z"], {}, "--service-account 'x@y.z'"),
    # -- what used to end in a traceback (item 6)
    ("job-command-unbalanced", [*VERTEX, "--command", "python 'x"], {}, "no closing quotation"),
    ("job-command-unbalanced-dry-run", [*CLUSTER_JOB, "--command", "python 'x", "--dry-run"], {},
     "no closing quotation"),
    ("job-file-command-unbalanced", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "cluster: c\ncommand: \"sh -c 'x\"\n"},
     "no closing quotation"),
    ("job-args-not-utf8-vertex", [*VERTEX, "--image", "busybox", "--", "\udcff\udcfe"], {}, "not UTF-8"),
    ("job-args-not-utf8-vertex-dry-run", [*VERTEX, "--dry-run", "--image", "busybox", "--", "\udcff"], {},
     "not UTF-8"),
    ("job-args-not-utf8-cluster", [*CLUSTER_JOB, "--", "--name", "caf\udce9"], {}, "byte 0xe9"),
    ("job-args-not-utf8-cluster-dry-run", [*CLUSTER_JOB, "--dry-run", "--", "\udcff"], {}, "not UTF-8"),
    ("job-env-not-utf8", [*CLUSTER_JOB, "--env", "K=\udcff"], {}, "--env"),
    ("job-label-newline", [*VERTEX, "--label", "a\nb=c"], {}, "--label a\\nb=c"),
    # -- the user's own code and data (issue 25)
    ("job-workdir-missing", [*CLUSTER_JOB, "--workdir", "{d}/nope"], {}, "--workdir"),
    ("job-workdir-empty-value", [*CLUSTER_JOB, "--workdir", ""], {}, "--workdir is empty"),
    ("job-workdir-empty-folder", [*CLUSTER_JOB, "--workdir", "{d}/empty"], {"empty": lambda p: p.mkdir()},
     "--workdir"),
    ("job-workdir-a-file", [*CLUSTER_JOB, "--workdir", "{d}/f.py"], {"f.py": "x = 1\n"}, "is not a folder"),
    # -- ignore files: size-capped (a 2 GiB one was a MemoryError; issue 36)
    ("job-workdir-gcpgpuignore-2gib", [*CLUSTER_JOB, "--workdir", "{d}/w"],
     {"w": _folder_with_ignore(".gcpgpuignore", size=2 * 2**30)}, ".gcpgpuignore: 2147483648 bytes, over the 1 MiB cap"),
    ("job-workdir-gitignore-2gib-vertex", [*VERTEX, "--image", "busybox", "--workdir", "{d}/w"],
     {"w": _folder_with_ignore(".gitignore", size=2 * 2**30)}, ".gitignore: 2147483648 bytes, over the 1 MiB cap"),
    ("context-gcpgpuignore-2gib", [*P, "--region", "us-central1", "container", "build", "--flavor", "none",
                                   "--context", "{d}/w"],
     {"w": _folder_with_ignore(".gcpgpuignore", size=2**20 + 1)}, "over the 1 MiB cap for an ignore file"),
    ("job-setup-no-target", [*SUBMIT, "--setup", "pip install x"], {}, "--setup"),
    ("job-mount-no-bucket", [*CLUSTER_JOB, "--mount", "gs://:/data"], {}, "names no bucket"),
    ("job-mount-not-gs", [*CLUSTER_JOB, "--mount", "/local:/data"], {}, "--mount '/local:/data'"),
    ("job-mount-no-target", [*CLUSTER_JOB, "--mount", "gs://my-data"], {}, "no mount point"),
    ("job-mount-relative", [*CLUSTER_JOB, "--mount", "gs://my-data:data"], {}, "absolute path"),
    ("job-mount-bad-mode", [*CLUSTER_JOB, "--mount", "gs://my-data:/out:rx"], {}, "':rx' is not a mode: end with :ro"),
    ("job-mount-localssd", [*CLUSTER_JOB, "--mount", "gs://my-data:/mnt/localssd/x"], {}, "/mnt/localssd/x is reserved"),
    ("job-mount-root", [*VERTEX, "--mount", "gs://my-data:/"], {}, "reserved"),
    ("job-mount-workdir", [*VERTEX, "--mount", "gs://my-data:/workdir"], {}, "/workdir is reserved"),
    ("job-mount-gcs", [*CLUSTER_JOB, "--mount", "gs://my-data:/gcs/x"], {}, "reserved"),
    ("job-mount-usr", [*CLUSTER_JOB, "--mount", "gs://my-data/a:/usr/:ro"], {}, "/usr is reserved"),
    ("job-mount-dotdot", [*CLUSTER_JOB, "--mount", "gs://my-data:/data/../etc"], {}, "'..'"),
    ("job-mount-twice", [*CLUSTER_JOB, "--mount", "gs://my-data:/data", "--mount", "gs://other-b:/data/:ro"], {},
     "two mounts on /data"),
    ("job-file-mount-reserved", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nmounts: [\"gs://my-data:/tmp\"]\n"}, "/tmp is reserved"),
    ("job-secret-not-pair", [*CLUSTER_JOB, "--secret", "projects/p-123/secrets/x"], {}, "--secret"),
    ("job-secret-bad-env", [*CLUSTER_JOB, "--secret", "1X=projects/my-proj/secrets/x"], {}, "environment variable"),
    ("job-secret-munge-key", [*CLUSTER_JOB, "--secret", "K=projects/my-proj/secrets/gcpgpu-munge-other"], {},
     "names a Slurm cluster's munge key"),
    ("job-secret-bad-ref", [*VERTEX, "--secret", "HF_TOKEN=hf_abc"], {}, "projects/PROJECT/secrets/NAME"),
    ("job-secret-bad-version", [*VERTEX, "--secret", "T=projects/my-proj/secrets/x/versions/0"], {}, "--secret T="),
    ("job-secret-and-env", [*CLUSTER_JOB, "--env", "T=1", "--secret", "T=projects/my-proj/secrets/x"], {},
     "also set with --env"),
    ("job-file-secrets-bad", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nsecrets: {TOKEN: plain-value}\n"}, "projects/PROJECT/secrets"),
    # -- gcpgpu's own GCPGPU_ variables (issue 36): --env GCPGPU_USER= ran user code as root, GCPGPU_MOUNTS and
    # GCPGPU_WORKDIR skipped --mount's and --workdir's checks
    ("job-env-gcpgpu-user", [*CLUSTER_JOB, "--env", "GCPGPU_USER="], {}, "--env GCPGPU_USER is gcpgpu's own"),
    ("job-env-gcpgpu-mounts", [*VERTEX, "--env", 'GCPGPU_MOUNTS=[{"source": "gs://b/evil", "target": "/data"}]'],
     {}, "--env GCPGPU_MOUNTS is gcpgpu's own variable, which a job may not set (use --mount)"),
    ("job-env-gcpgpu-workdir", [*CLUSTER_JOB, "--env", "GCPGPU_WORKDIR=gs://b/w.tar.gz"], {}, "(use --workdir)"),
    ("job-env-gcpgpu-python", [*CLUSTER_JOB, "--env", "GCPGPU_PYTHON=/gcs/b/evil"], {}, "--env GCPGPU_PYTHON"),
    ("job-file-env-gcpgpu-user", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nenv:\n  GCPGPU_USER: ''\n"}, "env GCPGPU_USER is gcpgpu's own"),
    ("job-secret-gcpgpu-setup", [*CLUSTER_JOB, "--secret", "GCPGPU_SETUP=projects/my-proj/secrets/x"], {},
     "--secret GCPGPU_SETUP is gcpgpu's own variable"),
    # -- retries, stalls and webhooks (issue 26)
    ("job-stall-timeout-unparsable", [*CLUSTER_JOB, "--stall-timeout", "soon"], {}, "--stall-timeout 'soon'"),
    ("job-stall-timeout-too-short", [*CLUSTER_JOB, "--stall-timeout", "2s"], {}, "--stall-timeout 2s must be"),
    ("job-stall-timeout-too-long", [*CLUSTER_JOB, "--stall-timeout", "30d"], {}, "from 5s to 7d"),
    ("job-file-stall-timeout-bad", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nstall_timeout: forever\n"}, "stall_timeout 'forever'"),
    ("job-exit-code-zero", [*CLUSTER_JOB, "--max-restarts-on-errors", "2", "--retry-on-exit-codes", "0"], {},
     "--retry-on-exit-codes '0' is not an exit code"),
    ("job-exit-code-256", [*CLUSTER_JOB, "--max-restarts-on-errors", "2", "--retry-on-exit-codes", "3,256"], {},
     "'256'"),
    ("job-exit-code-word", [*CLUSTER_JOB, "--max-restarts-on-errors", "2", "--retry-on-exit-codes", "oom"], {},
     "integers from 1 to 255"),
    ("job-exit-code-negative", [*CLUSTER_JOB, "--max-restarts-on-errors", "2", "--retry-on-exit-codes", "-1"], {},
     "--retry-on-exit-codes '-1'"),
    ("job-file-exit-codes-bad", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nmax_restarts_on_errors: 1\nretry_on_exit_codes: [3, 1.5]\n"},
     "'1.5'"),
    ("job-exit-codes-without-restarts", [*CLUSTER_JOB, "--retry-on-exit-codes", "3"], {},
     "needs --max-restarts-on-errors"),
    ("job-max-restarts-too-many", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nmax_restarts_on_errors: 1000\n"}, "from 0 to 100"),
    ("job-notify-not-http", [*CLUSTER_JOB, "--notify", "ftp://hooks.example.com/x"], {}, "is not an http(s) URL"),
    ("job-notify-no-host", [*CLUSTER_JOB, "--notify", "https:///x"], {}, "--notify 'https:///x'"),
    ("job-notify-pubsub", [*CLUSTER_JOB, "--notify", "pubsub:projects/my-proj/topics/jobs"], {},
     "Pub/Sub topics are not supported"),
    ("job-notify-bad-port", [*VERTEX, "--notify", "http://127.0.0.1:99999/x"], {}, "bad port"),
    # -- a user:token@ in a webhook: refused, and never printed (issue 36)
    ("job-notify-userinfo", [*CLUSTER_JOB, "--notify", "https://me:s3cr3t@hooks.example.com/hook"], {},
     "--notify https://hooks.example.com/...: a user or token before the host (user:token@) is refused"),
    ("job-notify-token-only", [*VERTEX, "--notify", "http://s3cr3t@hooks.example.com:8080/x"], {},
     "--notify http://hooks.example.com:8080/...: a user or token"),
    ("job-notify-userinfo-bad-port", [*CLUSTER_JOB, "--notify", "https://me:s3cr3t@hooks.example.com:99999/x"], {},
     "--notify https://hooks.example.com/...: a user or token"),
    ("job-notify-userinfo-not-http", [*CLUSTER_JOB, "--notify", "ftp://me:s3cr3t@hooks.example.com/x"], {},
     "a user or token before the host"),
    ("file-job-notify-userinfo", [*SUBMIT, "-f", "{d}/j.yaml"],
     {"j.yaml": "cluster: c\nimage: busybox\nnotify: https://me:s3cr3t@hooks.example.com/x\n"},
     "--notify https://hooks.example.com/...: a user or token"),
    ("job-stall-timeout-vertex", [*VERTEX, "--stall-timeout", "10m"], {}, "--stall-timeout applies to --cluster"),
    # -- a cluster's AUTOSTOPPED webhooks: checked as job submit's --notify (issue 26)
    ("up-notify-not-http", [*UP, *OK, "--autostop", "30m", "--notify", "ftp://hooks.example.com/x"], {},
     "--notify 'ftp://hooks.example.com/x' is not an http(s) URL"),
    ("up-notify-no-host", [*UP, *OK, "--autostop", "30m", "--notify", "https:///x"], {}, "--notify 'https:///x'"),
    ("up-notify-pubsub", [*UP, *OK, "--autostop", "30m", "--notify", "pubsub:projects/my-proj/topics/jobs"], {},
     "Pub/Sub topics are not supported"),
    ("up-notify-bad-port", [*UP, *OK, "--autostop", "30m", "--notify", "http://127.0.0.1:99999/x"], {}, "bad port"),
    ("up-notify-userinfo", [*UP, *OK, "--autostop", "30m", "--notify", "https://me:s3cr3t@h.example.com/x"], {},
     "--notify https://h.example.com/...: a user or token before the host (user:token@) is refused"),
    ("up-notify-too-many", [*UP, *OK, "--autostop", "30m", *["--notify", "https://h.example.com/x"] * 11], {},
     "--notify is given 11 times; 10 at most"),
    ("up-notify-without-autostop", [*UP, *OK, "--notify", "https://hooks.example.com/x"], {},
     "--notify needs --autostop DURATION"),
    ("file-autostop-notify-bad", [*UP, "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nautostop: 30m\n"
                "autostop_notify: [\"mailto:me@example.com\"]\n"}, "--notify 'mailto:me@example.com' is not an"),
    ("autostop-notify-not-http", [*P, "cluster", "autostop", "c", "30m", "--notify", "hooks.example.com/x"], {},
     "--notify 'hooks.example.com/x' is not an http(s) URL"),
    ("autostop-notify-userinfo", [*P, "cluster", "autostop", "c", "30m", "--notify", "https://me:s3cr3t@h.example.com/x"],
     {}, "--notify https://h.example.com/...: a user or token"),
    ("autostop-notify-pubsub", [*P, "cluster", "autostop", "c", "30m", "--notify",
                                "pubsub:projects/my-proj/topics/t1"], {}, "Pub/Sub topics are not supported"),
    # -- durations: one grammar (gcpgpu/times.py), every one bounded; 400 nines is a line, never an overflow
    ("autostop-nines", [*UP, *OK, "--autostop", "9" * 400 + "d"], {}, "--autostop '9999"),
    ("max-run-nines", [*UP, *OK, "--max-run-duration", "9" * 400 + "d"], {},
     "out of range: the run duration must be between 30s and 120d"),
    ("job-timeout-nines", [*VERTEX, "--timeout", "9" * 400 + "d"], {}, "--timeout '9999"),
    ("job-stall-nines", [*CLUSTER_JOB, "--stall-timeout", "9" * 400 + "d"], {}, "--stall-timeout '9999"),
    ("autostop-cmd-nines", [*P, "cluster", "autostop", "c", "9" * 400 + "d"], {}, "out of range: give between 1m and 30d"),
    ("metrics-since-nines", [*P, "metrics", "report", "--cluster", "c", "--since", "9" * 400 + "d", "-o", "{d}/r.png"],
     {}, "longer than six weeks"),
    ("reservation-start-nines", [*P, "--zone", "us-central1-a", "reservation", "create", "r", "--machine-type",
                                 "a3-highgpu-8g", "--count", "1", "--start", "9" * 400 + "d", "--duration", "2d"],
     {}, "more than 8 weeks ahead"),
    ("reservation-duration-nines", [*P, "--zone", "us-central1-a", "reservation", "create", "r", "--machine-type",
                                    "a3-highgpu-8g", "--count", "1", "--start", "2d", "--duration", "9" * 400 + "d"],
     {}, "a calendar-mode reservation lasts 1 to 90 days"),
    ("cluster-file-inf", [*P, "cluster", "up", "--yes", "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nmax_run_duration: .inf\n"},
     "max_run_duration inf is not a duration"),
    ("cluster-file-autostop-nan", [*P, "cluster", "up", "--yes", "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nautostop: .nan\n"},
     "autostop nan is not a duration"),
    ("cluster-file-huge-int-duration", [*P, "cluster", "up", "--yes", "-f", "{d}/c.yaml"],
     {"c.yaml": "name: c\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\nmax_run_duration: " + "9" * 4000 + "\n"},
     "max_run_duration"),
    ("job-file-timeout-inf", [*SUBMIT, "-f", "{d}/j.yaml"], {"j.yaml": "vertex: true\nmachine_type: a3-highgpu-8g\n"
                                                               "timeout: -.inf\n"}, "timeout -inf is not a duration"),
    ("autostop-notify-with-cancel", [*P, "cluster", "autostop", "c", "--cancel", "--notify", "https://h.example.com/x"],
     {}, "--cancel turns autostop off"),
]


def _make(path: Path, content: Content) -> None:
    if callable(content):
        content(path)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


@pytest.fixture(scope="module")
def forks():
    forks = CliForks()
    yield forks
    forks.close()


@pytest.mark.parametrize(("argv", "files", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_before_any_call(gcp, forks, tmp_path, argv, files, expect):
    for name, content in files.items():
        _make(tmp_path / name, content)
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    gcp.requests.clear()
    # A child of its own per row, limited in address space and time, talking to this emulator.
    done = forks.run(argv, env=dict(os.environ), limit=MEMORY_LIMIT, timeout=TIME_LIMIT_S)
    output = (done.stdout + done.stderr).decode(errors="replace")
    lines = output.strip().splitlines()
    assert done.returncode == 2, output[-2000:]
    assert len(lines) == 1, output[-2000:]
    assert expect in lines[0], lines[0]
    assert len(lines[0]) < 400, lines[0]  # a refused value is quoted short, never echoed whole
    assert gcp.requests.all() == [], [r.path for r in gcp.requests.all()]
    assert "s3cr3t" not in output  # a token given in a refused value is never printed back


def test_the_table_covers_at_least_a_hundred_inputs_across_commands_and_spec_files():
    assert len(CASES) >= 100
    assert len({c[0] for c in CASES}) == len(CASES)
    assert sum(1 for c in CASES if c[2] or "/dev/zero" in c[1]) >= 40  # spec files, not just flags
