"""cluster up/down stay safe when runs race, batches half-fail, state is edited by hand.

Everything runs against the emulator through google-cloud-compute; races use threads, each with its
own Cluster (its own attempt id and lease), against one emulator.
"""

from __future__ import annotations

import contextlib
import threading

import pytest
from click.testing import CliRunner
from google.cloud import compute_v1
from helpers import PROJECT, clients, leftovers, make_plan, wait_for

from gcpgpu.cli import main
from gcpgpu.cluster import lease as lease_mod
from gcpgpu.cluster.apply import Cluster, Reporter
from gcpgpu.cluster.lease import Lease, LeaseHeld
from gcpgpu.errors import CloudError

TTL_S = 2.0


@pytest.fixture(autouse=True)
def short_lease(monkeypatch):
    """A lease that expires in 2 s and is polled every 0.1 s, so takeover tests finish quickly."""
    monkeypatch.setenv("GCPGPU_LEASE_TTL", str(int(TTL_S)))
    monkeypatch.setattr(lease_mod, "POLL_SECONDS", 0.1)


def bulk_inserts(gcp) -> int:
    return len(gcp.requests.all(method="POST", contains="/instances/bulkInsert"))


def label(gcp, name: str, **labels: str) -> None:
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", name)
    new = {k: v for k, v in {**inst["labels"], **labels}.items() if v is not None}
    gcp.compute.set_labels(PROJECT, "us-central1-a", name, {"labels": new, "labelFingerprint": inst["labelFingerprint"]})


def unlabel(gcp, name: str, key: str) -> None:
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", name)
    new = {k: v for k, v in inst["labels"].items() if k != key}
    gcp.compute.set_labels(PROJECT, "us-central1-a", name, {"labels": new, "labelFingerprint": inst["labelFingerprint"]})


class Hook(Reporter):
    """Runs a function when `up` reaches a phase."""

    def __init__(self, key: str, fn) -> None:
        self.key, self.fn = key, fn

    def step(self, key: str, text: str) -> None:
        if key == self.key:
            self.fn()


class Waiting(Reporter):
    """Remembers what a run said while it waited (for the lease: "cluster c is busy: ...")."""

    def __init__(self) -> None:
        self.said: list[str] = []

    @contextlib.contextmanager
    def waiting(self, text: str):
        yield self.said.append

    def busy(self) -> bool:
        return any("is busy" in line for line in self.said)


class LapseWhenBusy(Reporter):
    """A run that, once it says it waits for another's lease, sets the emulator's clock on by the lease's lifetime
    (the clock the lease and its polls read): a dead run's lease lapses then, instead of the test waiting it out."""

    def __init__(self, gcp) -> None:
        self.gcp, self.lapsed = gcp, False

    @contextlib.contextmanager
    def waiting(self, text: str):
        def update(line: str) -> None:
            if "is busy" in line and not self.lapsed:
                self.lapsed = True
                self.gcp.clock.advance(TTL_S)

        yield update


class Killed(BaseException):
    """A kill -9 stand-in: no roll-back (BaseException), no lease release, no renewal."""


def kill_at(cluster_ref: list, key: str) -> Hook:
    def die() -> None:
        c = cluster_ref[0]
        c.lease._stop.set()  # the renewing thread dies with the process
        c.lease.held = False  # ... and nothing releases the lease
        raise Killed

    return Hook(key, die)


# ---------------------------------------------------------------- ownership and roll-back
def test_half_failed_network_batch_rolls_back_its_own_members_and_never_a_foreign_one(gcp):
    """4 GPU networks in parallel, 1 refused (a user's look-alike already has the name): the 3 that were
    created and the placement policy go; the user's network stays."""
    net = compute_v1.Network(name="c-gpunet-3", auto_create_subnetworks=False)
    clients(gcp).compute("NetworksClient").insert(project=PROJECT, network_resource=net).result()
    with pytest.raises(Exception, match="alreadyExists|already exists"):
        Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    assert leftovers(gcp) == {"networks": ["c-gpunet-3"]}


def test_every_created_resource_records_its_attempt(gcp):
    c = Cluster(clients(gcp), PROJECT)
    c.up(make_plan(nodes=2))
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-0")
    assert inst["labels"]["gcpgpu-attempt"] == c.attempt
    for path, name in [("regions/us-central1/resourcePolicies", "c-placement"), ("global/networks", "c-gpunet-1"),
                       ("regions/us-central1/subnetworks", "c-gpusub-1"), ("global/firewalls", "c-internal")]:
        assert gcp.compute.get(PROJECT, path, name)["description"].endswith(f" attempt={c.attempt}"), path


# ---------------------------------------------------------------- down always finishes
def test_down_of_a_cluster_with_a_node_relabelled_by_hand_leaves_nothing(gcp):
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=4))
    label(gcp, "c-2", **{"gcpgpu-cluster": "someone-elses"})
    Cluster(clients(gcp), PROJECT).down("c")
    assert leftovers(gcp) == {}


def test_down_keeps_going_past_a_failure_and_names_each_leftover_in_one_line(gcp):
    """A VM outside the cluster uses GPU network 1: everything else goes, and exactly that is reported."""
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    vm = compute_v1.Instance(name="intruder", machine_type="zones/us-central1-a/machineTypes/a2-highgpu-1g",
                             disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=(
                                 compute_v1.AttachedDiskInitializeParams(
                                     source_image="projects/debian-cloud/global/images/family/debian-12")))],
                             network_interfaces=[compute_v1.NetworkInterface(
                                 network=f"projects/{PROJECT}/global/networks/c-gpunet-1",
                                 subnetwork=f"projects/{PROJECT}/regions/us-central1/subnetworks/c-gpusub-1")],
                             scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"))
    clients(gcp).compute("InstancesClient").insert(project=PROJECT, zone="us-central1-a",
                                                   instance_resource=vm).result()
    with pytest.raises(CloudError) as err:
        Cluster(clients(gcp), PROJECT).down("c")
    lines = err.value.message.splitlines()
    assert "2 resource(s) could not be deleted" in lines[0]
    assert sorted(line.split(":")[0].strip() for line in lines[1:]) == ["network c-gpunet-1",
                                                                        "subnetwork c-gpusub-1 (us-central1)"]
    assert all("resourceInUseByAnotherResource" in line for line in lines[1:])
    assert leftovers(gcp) == {"instances": ["intruder"], "networks": ["c-gpunet-1"], "subnetworks": ["c-gpusub-1"]}
    clients(gcp).compute("InstancesClient").delete(project=PROJECT, zone="us-central1-a", instance="intruder").result()
    Cluster(clients(gcp), PROJECT).down("c")  # the second down finishes the job
    assert leftovers(gcp) == {}


def test_down_of_c_never_touches_cluster_c_x(gcp):
    Cluster(clients(gcp), PROJECT).up(make_plan(name="c", nodes=1, machine_type="a2-highgpu-1g"))
    Cluster(clients(gcp), PROJECT).up(make_plan(name="c-x", nodes=1, machine_type="a2-highgpu-1g"))
    Cluster(clients(gcp), PROJECT).down("c")
    assert sorted(leftovers(gcp)["instances"]) == ["c-x-0"]
    Cluster(clients(gcp), PROJECT).down("c-x")
    assert leftovers(gcp) == {}


# ---------------------------------------------------------------- waits that notice
@pytest.mark.parametrize("how", ["deleted", "stopped"])
def test_wait_fails_fast_when_a_node_vanishes_and_the_attempt_leaves_nothing(gcp, how):
    def vanish() -> None:
        if how == "deleted":
            gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", "c-1")
        else:
            gcp.compute.stop(PROJECT, "us-central1-a", "c-1")

    with pytest.raises(CloudError, match="c-1") as err:
        Cluster(clients(gcp), PROJECT, Hook("running", vanish)).up(make_plan(nodes=2))
    assert "\n" not in err.value.message
    assert leftovers(gcp) == {}


# ---------------------------------------------------------------- repairs
def test_rerun_repairs_missing_and_duplicate_rank_labels_and_status_flags_them(gcp, monkeypatch):
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=4))
    unlabel(gcp, "c-1", "gcpgpu-rank")
    label(gcp, "c-3", **{"gcpgpu-rank": "2"})
    gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", "c-0")
    wait_for(lambda: "c-0" not in [i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")],
             what="c-0 deleted")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    status = CliRunner().invoke(main, ["cluster", "status", "c"])
    assert status.exit_code == 0, status.output
    assert "problem: 1 of 4 node(s) missing: c-0" in status.output
    assert "problem: node c-1 has no gcpgpu-rank label" in status.output
    assert "problem: rank 2 is claimed by 2 nodes: c-2, c-3" in status.output

    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=4))
    assert [(n.name, n.labels["gcpgpu-rank"]) for n in nodes] == [("c-0", "0"), ("c-1", "1"), ("c-2", "2"),
                                                                  ("c-3", "3")]
    status = CliRunner().invoke(main, ["cluster", "status", "c"])
    assert "problem" not in status.output


def test_rerun_after_a_kill_between_bulkinsert_and_rank_labels_labels_every_node(gcp):
    ref: list = []
    c = Cluster(clients(gcp), PROJECT, kill_at(ref, "labels"))
    ref.append(c)
    with pytest.raises(Killed):
        c.up(make_plan(nodes=3))
    assert all("gcpgpu-rank" not in i["labels"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"))
    nodes = Cluster(clients(gcp), PROJECT, taker := LapseWhenBusy(gcp)).up(make_plan(nodes=3))
    assert taker.lapsed  # it waited out the dead run's lease
    assert [n.labels.get("gcpgpu-rank") for n in nodes] == ["0", "1", "2"]


# ---------------------------------------------------------------- the lease
def test_a_run_waiting_for_the_lease_says_who_holds_it_when_stderr_is_not_a_terminal(gcp, monkeypatch):
    """Under CI or a pipe there is no spinner: a wait of minutes printed nothing at all."""
    held = Lease(clients(gcp), PROJECT, "c", holder="someone", op="up")
    assert held.try_acquire() is None  # held, and nobody renews it: it expires after the TTL (2 s here)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    result = CliRunner().invoke(main, ["cluster", "down", "c", "--yes"])
    assert result.exit_code == 0, result.output
    assert "taking cluster c's lease" in result.output
    assert "cluster c is busy: up by " in result.output and "lease expires in" in result.output


def test_ctrl_c_says_interrupted_once_with_what_to_run(gcp, monkeypatch):
    from gcpgpu.cli import progress

    def interrupt(self, key: str, text: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(progress.ConsoleReporter, "step", interrupt)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    result = CliRunner().invoke(main, ["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--zone",
                                       "us-central1-a", "--yes"])
    assert result.exit_code == 130
    said = [line for line in result.output.splitlines() if "Interrupted" in line]
    assert len(said) == 1 and "gcpgpu cluster up c" in said[0], result.output


def test_a_second_run_with_no_wait_exits_1_in_one_line_naming_the_holder(gcp, monkeypatch):
    held = Lease(clients(gcp), PROJECT, "c", holder="someone", op="up")
    held.acquire()
    try:
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        for argv in (["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", "--yes",
                      "--no-wait"], ["cluster", "down", "c", "--yes", "--no-wait"]):
            gcp.requests.clear()
            result = CliRunner().invoke(main, argv)
            assert result.exit_code == 1, result.output
            errors = [line for line in result.output.splitlines() if line.startswith("Error")]
            assert len(errors) == 1 and result.output.strip().endswith(errors[0]), result.output  # one line, last
            assert "cluster c is busy: up by " in result.output and "pid" in result.output
            assert "lease expires in" in result.output
            assert not gcp.requests.all(method="POST", contains="/instances")  # nothing was created
    finally:
        held.release()
    assert leftovers(gcp) == {}


def test_lease_is_renewed_while_held_and_released_at_the_end(gcp):
    lease = Lease(clients(gcp), PROJECT, "c", holder="h1", op="up")
    lease.acquire()
    first = lease_mod.current(clients(gcp), PROJECT, "c")["expires"]
    # TTL 2 s: renewed every 0.5 s
    wait_for(lambda: lease_mod.current(clients(gcp), PROJECT, "c")["expires"] > first, what="a renewal")
    assert Lease(clients(gcp), PROJECT, "c", holder="h2", op="up").try_acquire()["holder"] == "h1"
    lease.release()
    assert lease_mod.current(clients(gcp), PROJECT, "c") is None
    assert "gcpgpu-lease-c" not in str(gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"])


def test_two_takers_of_an_expired_lease_never_both_win(gcp):
    dead = Lease(clients(gcp), PROJECT, "c", holder="dead", op="up", ttl=0.2)
    dead.try_acquire()
    gcp.clock.advance(1.0)  # past its lease
    takers = [Lease(clients(gcp), PROJECT, "c", holder=f"t{i}", op="up") for i in range(4)]
    barrier = threading.Barrier(len(takers))
    results: list = [None] * len(takers)

    def take(i: int) -> None:
        barrier.wait()
        results[i] = takers[i].try_acquire()

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(takers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is None for r in results) == 1
    winner = next(t.holder for t, r in zip(takers, results, strict=True) if r is None)
    assert {r["holder"] for r in results if r is not None} == {winner}


# ---------------------------------------------------------------- two `up`s of one name
def run_threads(*fns) -> list:
    out: list = [None] * len(fns)

    def wrap(i: int, fn) -> None:
        try:
            out[i] = fn()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            out[i] = e

    threads = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run hung"
    return out


def test_race_both_start_together_one_creates_both_end_with_the_cluster(gcp):
    barrier = threading.Barrier(2)
    a, b = Cluster(clients(gcp), PROJECT), Cluster(clients(gcp), PROJECT)
    p = make_plan(nodes=4)
    out = run_threads(lambda: (barrier.wait(), a.up(p))[1], lambda: (barrier.wait(), b.up(p))[1])
    assert all(isinstance(r, list) and [n.name for n in r] == ["c-0", "c-1", "c-2", "c-3"] for r in out), out
    assert bulk_inserts(gcp) == 1  # at most one created the nodes
    assert len(gcp.requests.all(method="POST", contains="/global/networks")) == 4  # and the networks, once
    creators = {i["labels"]["gcpgpu-attempt"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")}
    assert len(creators) == 1 and creators <= {a.attempt, b.attempt}
    assert not gcp.requests.all(method="DELETE")  # neither deleted anything
    Cluster(clients(gcp), PROJECT).down("c")
    assert leftovers(gcp) == {}


@pytest.mark.parametrize("second_waits", [True, False])
def test_race_second_starts_mid_bulkinsert(gcp, second_waits):
    p = make_plan(nodes=4)
    told = Waiting()
    b = Cluster(clients(gcp), PROJECT, told)
    second: list = []  # B's result (its nodes, or the LeaseHeld it was refused with), once it has one
    threads: list[threading.Thread] = []

    def start_second() -> None:
        t = threading.Thread(target=lambda: second.append(_catch(lambda: b.up(p, wait_for_lease=second_waits))))
        threads.append(t)
        t.start()
        # B is now blocked on (or refused by) the lease while A's bulkInsert runs
        wait_for(lambda: told.busy() or second, timeout=120, what="B finding the lease held")

    a = Cluster(clients(gcp), PROJECT, Hook("instances", start_second))
    nodes = a.up(p)
    threads[0].join(timeout=120)
    (result,) = second
    assert [n.name for n in nodes] == ["c-0", "c-1", "c-2", "c-3"]
    if second_waits:
        assert [n.name for n in result] == ["c-0", "c-1", "c-2", "c-3"]
    else:
        assert isinstance(result, LeaseHeld) and "cluster c is busy: up by " in result.message
        assert "\n" not in result.message
    assert bulk_inserts(gcp) == 1
    assert not gcp.requests.all(method="DELETE")
    Cluster(clients(gcp), PROJECT).down("c")
    assert leftovers(gcp) == {}


@pytest.mark.parametrize("phase", ["networks", "instances", "running"])
def test_race_first_killed_holding_the_lease_second_takes_over_and_completes(gcp, phase):
    p = make_plan(nodes=4)
    ref: list = []
    a = Cluster(clients(gcp), PROJECT, kill_at(ref, phase))
    ref.append(a)
    with pytest.raises(Killed):
        a.up(p)
    assert lease_mod.current(clients(gcp), PROJECT, "c")["holder"] == a.attempt  # the dead run still holds it
    b = Cluster(clients(gcp), PROJECT, taker := LapseWhenBusy(gcp))
    nodes = b.up(p)  # waits for the lease to expire, then completes what A left
    assert taker.lapsed  # it did wait
    assert [n.name for n in nodes] == ["c-0", "c-1", "c-2", "c-3"]
    assert bulk_inserts(gcp) == 1
    assert not gcp.requests.all(method="DELETE")  # B took over A's resources, it did not remove them
    Cluster(clients(gcp), PROJECT).down("c")
    assert leftovers(gcp) == {}


def test_race_up_and_down_of_one_name_never_interleave(gcp):
    p = make_plan(nodes=2)
    down_result: list = []
    told = Waiting()
    d = Cluster(clients(gcp), PROJECT, told)

    def start_down() -> None:
        t = threading.Thread(target=lambda: down_result.append(_catch(lambda: d.down("c"))))
        t.start()
        down_result.append(t)
        wait_for(told.busy, timeout=120, what="down waiting for the lease")

    nodes = Cluster(clients(gcp), PROJECT, Hook("instances", start_down)).up(p)
    assert len(nodes) == 2  # the up finished whole: down waited for it
    down_result[0].join(timeout=120)
    assert down_result[1].count() > 0  # then down removed the complete cluster
    assert leftovers(gcp) == {}


def _catch(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - returned for the test to inspect
        return e


def _lease_keys(gcp) -> list[str]:
    items = gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"].get("items", [])
    return [i["key"] for i in items if i["key"].startswith(lease_mod.KEY_PREFIX)]


@pytest.mark.parametrize("seed", [10, 15, 23, 27])
def test_an_up_that_gives_up_under_90_percent_503s_says_its_lease_stays_and_down_removes_everything(
        gcp, monkeypatch, seed):
    """Issue 51: under heavy injected 503s a failed `up` left resources (14 in one run) or its lease, and said
    nothing of them. The lease it could not release is now said, with what takes it over; `down` then leaves
    nothing. (Retries shortened from 90 s to 0.6 s so that requests give up here; the seed fixes the draws.)"""
    from gcpgpu.gcp import operations

    monkeypatch.setattr(operations.retrying, "__defaults__", (0.02, 0.1, 0.6))
    monkeypatch.setattr(operations, "RETRY_INITIAL", 0.02)
    monkeypatch.setattr(operations, "RETRY_MAX", 0.1)
    gcp.faults.update({"operation_seconds": 0, "error_rate": 0.9, "error_codes": [503], "seed": seed})
    up = CliRunner().invoke(main, ["--project", PROJECT, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g",
                                   "--nodes", "4", "--zone", "us-central1-a", "--yes"])
    gcp.faults.update({"error_rate": 0.0})
    assert any(r.status == 503 for r in gcp.requests.all())  # the faults really fired
    if up.exit_code != 0 and _lease_keys(gcp):  # the lease it could not release is said, with what takes it over
        said = [line for line in up.output.splitlines() if "lease stays" in line]
        assert said and "gcpgpu-lease-c" in said[0] and "'gcpgpu cluster down c'" in said[0], up.output
    # Resources the roll-back could not delete are named in the error: see the test below, which makes every
    # delete fail. (Here, under load, a router deleted by the roll-back was once seen again afterwards: the
    # emulator's operation ordering, noted in the report of issue 51, not asserted on.)
    down = CliRunner().invoke(main, ["--project", PROJECT, "cluster", "down", "c", "--yes"])
    assert down.exit_code == 0, down.output
    assert leftovers(gcp) == {} and _lease_keys(gcp) == []


def test_a_roll_back_that_cannot_delete_names_each_resource_it_left_and_the_command(gcp, monkeypatch):
    from gcpgpu.gcp import operations

    monkeypatch.setattr(operations.retrying, "__defaults__", (0.02, 0.1, 0.3))
    monkeypatch.setattr(operations, "RETRY_INITIAL", 0.02)
    monkeypatch.setattr(operations, "RETRY_MAX", 0.1)
    # The zone has no A100s: up fails after the networks and policy are made, and no delete gets through.
    gcp.faults.update({"operation_seconds": 0, "capacity": {"us-central1-a": {"a2-highgpu-1g": 0}},
                       "error_rate": 1.0, "error_codes": [503], "error_methods": ["DELETE"]})
    up = CliRunner().invoke(main, ["--project", PROJECT, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g",
                                   "--nodes", "2", "--zone", "us-central1-a", "--yes"])
    assert up.exit_code == 1, up.output
    gcp.faults.update({"error_rate": 0.0})
    left = leftovers(gcp)
    assert left, "the roll-back deleted everything: nothing to name"
    error = [line for line in up.output.splitlines() if line.startswith("Error: ")]
    assert len(error) == 1 and "nothing was left behind" not in error[0], up.output
    for names in left.values():
        for name in names:
            assert name in error[0], (name, error[0])
    assert "'gcpgpu cluster down c' removes them" in error[0]
    assert CliRunner().invoke(main, ["--project", PROJECT, "cluster", "down", "c", "--yes"]).exit_code == 0
    assert leftovers(gcp) == {} and _lease_keys(gcp) == []
