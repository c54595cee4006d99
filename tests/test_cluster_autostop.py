"""Autostop judged on the cluster itself: the follower its nodes run stops (or deletes) an idle cluster.

Idle time is counted GCPGPU_AUTOSTOP_SCALE times faster here (the node agents' test seam), so a
`--autostop 1m` cluster goes after about two seconds of idleness instead of a minute. Where a test shows
that a cluster is NOT stopped, it sets the emulator's clock (the followers' too: gcpgpu.gcp.clock) past the
autostop and waits for the leading follower's next rounds, rather than watching for a fixed time.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, followers_log, leftovers, wait_for, webhook_server

from gcpgpu.cli import main

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["cluster", "up", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


@pytest.fixture
def fast(gcp, monkeypatch):
    monkeypatch.setenv("GCPGPU_AUTOSTOP_SCALE", "30")  # 1m of idleness in 2 s
    monkeypatch.setenv("GCPGPU_LEASE_TTL", "20")
    return gcp


def statuses(gcp, cluster: str) -> dict[str, str]:
    found = gcp.compute.list(PROJECT, "zones/us-central1-a/instances")
    return {i["name"]: i["status"] for i in found if i["name"].startswith(f"{cluster}-")}


def rounds(gcp, seen: int | None = None, what: str = "ListTimeSeries") -> int:
    """How many rounds the leading follower has made: it reads the GPUs' utilization (ListTimeSeries) each
    autostop judgement, the nodes' guest attributes each look at a running job. With `seen`, first wait
    until it has made two more than that (the first may have begun before the caller's change)."""
    def count() -> int:
        return len(gcp.requests.all(contains=what))

    if seen is not None:
        wait_for(lambda: count() >= seen + 2, timeout=60, what=f"two more rounds of the leading follower ({what})")
    return count()


def project_metadata_keys(gcp) -> list[str]:
    items = gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"].get("items", [])
    return [i["key"] for i in items]


def test_an_idle_cluster_with_autostop_down_deletes_itself_leaving_nothing(fast):
    gcp = fast
    up = cli(*UP[:2], "idle", *UP[2:], "--no-placement", "--autostop", "1m", "--down")
    assert up.exit_code == 0, up.output
    listed = cli("cluster", "list")
    assert "AUTOSTOP" in listed.output and "1m (down)" in listed.output
    status = json.loads(cli("cluster", "status", "idle", fmt="json").stdout)
    assert status["autostop"] == {"idle_s": 60, "down": True}
    gcp.jobs.agent.simulated_run_s = 0.5  # a job ran on it first: its record goes with the cluster too
    submitted = cli("job", "submit", "--cluster", "idle", "--image", "busybox", "--wait")
    assert submitted.exit_code == 0, submitted.output
    assert "gcpgpu-jobs-idle" in project_metadata_keys(gcp)
    # Nothing here follows it: the nodes' own followers judge it idle and delete it, the judge last.
    wait_for(lambda: not statuses(gcp, "idle") and not leftovers(gcp), timeout=120, what="the cluster gone")
    assert leftovers(gcp) == {}
    assert not [k for k in project_metadata_keys(gcp) if k.endswith("-idle")]  # no lease, journal or job record
    wait_for(lambda: not gcp.jobs.node_agents.running(), timeout=30, what="the followers gone with their nodes")
    assert cli("cluster", "status", "idle").exit_code == 1
    # What it and its job cost stays in the project's cost records, as after `cluster down`.
    report = json.loads(cli("cost", "report", "--by", "job", fmt="json").stdout)
    assert {r["job"] for r in report["rows"]} == {submitted.stdout.splitlines()[0], "idle (no job)"}
    by_cluster = json.loads(cli("cost", "report", "--by", "cluster", fmt="json").stdout)
    assert [r["cluster"] for r in by_cluster["rows"]] == ["idle"] and by_cluster["total"]["node_hours"] > 0


@pytest.fixture
def webhook():
    with webhook_server(fail_first=True, query="?token=s3cret") as served:
        yield served


def test_an_idle_cluster_tells_its_webhook_autostopped_once_before_it_deletes_itself(fast, webhook):
    gcp = fast
    url, hook = webhook
    up = cli(*UP[:2], "told", *UP[2:], "--no-placement", "--autostop", "1m", "--down", "--notify", url)
    assert up.exit_code == 0, up.output
    # The setting (and the spec a recovery re-creates nodes from) holds the URL; what is shown counts it.
    for inst in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"):
        items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
        assert json.loads(items["gcpgpu-autostop"])["notify"] == [url]
        assert json.loads(items["gcpgpu-spec"])["autostop_notify"] == [url]
    status = cli("cluster", "status", "told", fmt="json")
    assert json.loads(status.stdout)["autostop"] == {"idle_s": 60, "down": True, "notify": 1}
    assert "s3cret" not in status.stdout and "s3cret" not in cli("cluster", "list", fmt="json").stdout
    # Nothing here follows it: the leading node's follower tells the webhook, then deletes the cluster.
    wait_for(lambda: not statuses(gcp, "told") and not leftovers(gcp), timeout=120, what="the cluster gone")
    told = [m for m in hook.got if m["event"] == "AUTOSTOPPED"]
    assert len(told) == 1 and hook.calls == 2, (hook.got, followers_log(gcp))  # the 503 was retried, once
    (m,) = told
    assert m["cluster"] == "told" and m["action"] == "delete" and m["nodes"] == ["told-0", "told-1"]
    assert m["idle_s"] == 60 and m["idle_since"] <= m["at"]
    log = followers_log(gcp)
    assert "telling 1 webhook(s): AUTOSTOPPED" in log and "s3cret" not in log and "127.0.0.1" not in log


def test_a_cluster_running_a_job_is_not_stopped_until_the_job_ends(fast, webhook):
    gcp = fast
    url, hook = webhook
    gcp.jobs.agent.simulated_run_s = 3600.0  # of the emulator's clock: the job ends when the test sets it so
    assert cli(*UP[:2], "busy", *UP[2:], "--autostop", "1m", "--notify", url).exit_code == 0
    submitted = cli("job", "submit", "--cluster", "busy", "--image", "busybox")  # simulated
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    wait_for(lambda: f"leading: following job {job_id}" in followers_log(gcp), timeout=60, what="a leader on the job")
    # Four scaled minutes on (well past the autostop, within the leader's lease): the job still runs on
    # RUNNING nodes after its follower has looked at it again, twice.
    seen = rounds(gcp, what="getGuestAttributes")
    gcp.clock.advance(8)
    rounds(gcp, seen, what="getGuestAttributes")
    assert statuses(gcp, "busy") == {"busy-0": "RUNNING", "busy-1": "RUNNING"}
    assert json.loads(cli("job", "status", job_id, fmt="json").stdout)["state"] == "RUNNING"
    # Once it has ended and the cluster has idled, it is stopped (not deleted: no --down).
    assert hook.got == []  # nothing said while the job ran
    gcp.clock.advance(3600)  # the job's end, after an hour of busy GPUs
    wait_for(lambda: json.loads(cli("job", "status", job_id, fmt="json").stdout)["state"] == "SUCCEEDED",
             timeout=60, what="the job's end")
    gcp.clock.advance(60)  # the Ops Agent's next sample, the first to show the GPUs idle
    wait_for(lambda: set(statuses(gcp, "busy").values()) == {"TERMINATED"}, timeout=120, what="the cluster stopped")
    assert [(m["event"], m["action"], m["nodes"]) for m in hook.got] == [("AUTOSTOPPED", "stop", ["busy-0", "busy-1"])]
    assert "busy-placement" in str(leftovers(gcp))  # stopped, not torn down: `cluster up` starts it again


def test_cluster_autostop_sets_and_cancels_on_every_node(gcp):
    assert cli(*UP[:2], "c", *UP[2:]).exit_code == 0
    assert "AUTOSTOP" in cli("cluster", "list").output
    done = cli("cluster", "autostop", "c", "2h", "--down")
    assert done.exit_code == 0, done.output
    assert "deleted once idle for 2h" in done.output
    nodes = gcp.compute.list(PROJECT, "zones/us-central1-a/instances")
    for inst in nodes:
        items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
        assert json.loads(items["gcpgpu-autostop"]) == {"idle_s": 7200, "down": True}
        assert json.loads(items["gcpgpu-spec"])["autostop"] == 7200  # a recovery's new nodes get it too
        assert "gcpgpu-agent" in items
    assert json.loads(cli("cluster", "status", "c", fmt="json").stdout)["autostop"]["idle_s"] == 7200
    hooks = ["https://hooks.example.com/a?token=s3cret", "http://127.0.0.1:9/b"]
    told = cli("cluster", "autostop", "c", "30m", "--notify", hooks[0], "--notify", hooks[1], fmt="json")
    assert told.exit_code == 0 and json.loads(told.stdout)["autostop"]["notify"] == 2, told.output
    assert "s3cret" not in told.output
    for inst in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"):
        items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
        assert json.loads(items["gcpgpu-autostop"]) == {"idle_s": 1800, "down": False, "notify": hooks}
        assert json.loads(items["gcpgpu-spec"])["autostop_notify"] == hooks
    off = cli("cluster", "autostop", "c", "--cancel")
    assert off.exit_code == 0 and "autostop off" in off.output
    for inst in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"):
        keys = {i["key"] for i in inst["metadata"]["items"]}
        assert "gcpgpu-autostop" not in keys and "gcpgpu-agent" not in keys
        spec = json.loads(next(i["value"] for i in inst["metadata"]["items"] if i["key"] == "gcpgpu-spec"))
        assert spec["autostop"] is None and spec["autostop_notify"] == []
    assert json.loads(cli("cluster", "status", "c", fmt="json").stdout)["autostop"] is None


@pytest.mark.parametrize("argv, words", [
    (["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--autostop", "10s", "--yes"], "--autostop '10s'"),
    (["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--autostop", "31d", "--yes"], "out of range"),
    (["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--autostop", "soon", "--yes"], "not a duration"),
    (["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--down", "--yes"], "--down needs --autostop"),
    (["cluster", "autostop", "c", "5 min"], "DURATION '5 min'"),
    (["cluster", "autostop", "c"], "give DURATION"),
    (["cluster", "autostop", "c", "5m", "--cancel"], "--cancel turns autostop off"),
    (["cluster", "autostop", "Bad_Name", "5m"], "Bad_Name"),
])
def test_bad_autostop_input_is_one_line_and_no_request(gcp, argv, words):
    gcp.requests.clear()
    result = cli(*argv)
    assert result.exit_code == 2, result.output
    assert words in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert gcp.requests.all() == [], [r.path for r in gcp.requests.all()]


def test_autostop_on_a_missing_cluster_exits_1_without_writing(gcp):
    gcp.requests.clear()
    result = cli("cluster", "autostop", "ghost", "30m")
    assert result.exit_code == 1 and "no cluster named ghost" in result.output
    assert all(r.method == "GET" for r in gcp.requests.all())


def test_the_follower_runs_from_the_image_jobs_default_to():
    from gcpgpu.image.follower import agent_image
    from gcpgpu.image.name import stale_image

    built = "us-central1-docker.pkg.dev/p/gcpgpu/gcpgpu-trainer:a3-0123456789ab"
    assert agent_image(built, "us-central1", "p") == built  # a detached job's follower runs the image it built
    assert agent_image("docker.io/me/mine:1", "us-central1", "p", built) == built  # else what the node runs
    stale = stale_image("us-central1", "p")
    assert agent_image("docker.io/me/mine:1", "us-central1", "p", stale, built) == built  # never the :latest nothing pushes
    assert agent_image(None, "us-central1", "p") == stale  # ... unless nothing else is known (nodes of older versions)


BUILT = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-0123456789ab"


def followers_images(gcp, cluster: str) -> dict[str, tuple[str | None, str | None]]:
    """Each node's follower image: its metadata gcpgpu-agent, and agent_image in the spec it carries."""
    out = {}
    for inst in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"):
        if inst["name"].startswith(f"{cluster}-"):
            items = {i["key"]: i["value"] for i in inst["metadata"].get("items", [])}
            out[inst["name"]] = (items.get("gcpgpu-agent"), json.loads(items["gcpgpu-spec"]).get("agent_image"))
    return out


def test_autostop_s_follower_runs_the_image_container_build_last_pushed(gcp):
    """Not a :latest tag that nothing pushes: this machine's record of the last build, else the newest
    FLAVOR-* image in Artifact Registry (the emulator's has none-emulator), in the nodes' metadata and
    in the spec a recovery re-creates nodes from."""
    from gcpgpu import catalog
    from gcpgpu.image import default as default_image

    assert catalog.get_machine_type("a2-highgpu-1g").gpudirect == "none"
    default_image.remember(emulated=gcp.address, project=PROJECT, region="us-central1", flavor="none", image=BUILT)
    assert cli(*UP[:2], "rec", *UP[2:], "--autostop", "30m").exit_code == 0
    assert followers_images(gcp, "rec") == {"rec-0": (BUILT, BUILT), "rec-1": (BUILT, BUILT)}

    default_image.state_file(emulated=True).unlink()  # another machine: Artifact Registry answers
    assert cli(*UP[:2], "reg", *UP[2:]).exit_code == 0
    assert cli("cluster", "autostop", "reg", "30m").exit_code == 0
    seeded = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-emulator"
    assert followers_images(gcp, "reg") == {"reg-0": (seeded, seeded), "reg-1": (seeded, seeded)}


def test_autostop_with_no_image_built_is_one_line_and_changes_nothing(gcp):
    gcp.artifactregistry.seeded = False  # a project where `container build` never ran
    gcp.requests.clear()
    up = cli(*UP[:2], "none", *UP[2:], "--autostop", "30m")
    assert up.exit_code == 2, up.output
    assert len(up.output.strip().splitlines()) == 1 and "gcpgpu container build" in up.output, up.output
    assert [r.path for r in gcp.requests.all() if r.method != "GET"] == []
    assert cli(*UP[:2], "none", *UP[2:]).exit_code == 0
    gcp.requests.clear()
    later = cli("cluster", "autostop", "none", "30m")
    assert later.exit_code == 2 and "gcpgpu container build" in later.output, later.output
    assert [r.path for r in gcp.requests.all() if r.method != "GET"] == []
    assert cli("cluster", "autostop", "none", "--cancel").exit_code == 0  # turning it off needs no image


def test_autostop_dry_run_names_the_follower_image_without_a_request(gcp):
    from gcpgpu.image import default as default_image

    def agent(result) -> str:
        assert result.exit_code == 0, result.output
        items = json.loads(result.stdout)["bulkInsert"]["instanceProperties"]["metadata"]["items"]
        return next(i["value"] for i in items if i["key"] == "gcpgpu-agent")

    gcp.requests.clear()
    pattern = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-*"
    assert agent(cli(*UP[:2], "dry", *UP[2:], "--autostop", "30m", "--dry-run", fmt="json")) == pattern
    default_image.remember(emulated=gcp.address, project=PROJECT, region="us-central1", flavor="none", image=BUILT)
    assert agent(cli(*UP[:2], "dry", *UP[2:], "--autostop", "30m", "--dry-run", fmt="json")) == BUILT
    assert gcp.requests.all() == []


def test_the_nodes_followers_start_with_the_cluster_and_cluster_down_leaves_no_lease(gcp):
    assert cli(*UP[:2], "led", *UP[2:], "--autostop", "30m").exit_code == 0
    wait_for(lambda: "gcpgpu-leader-led" in project_metadata_keys(gcp), timeout=60, what="a leading follower")
    assert set(gcp.jobs.node_agents.running()) == {"led-0", "led-1"}  # one per node; one of them leads
    assert cli("cluster", "down", "led", "--yes").exit_code == 0
    assert "gcpgpu-leader-led" not in project_metadata_keys(gcp)
    wait_for(lambda: not gcp.jobs.node_agents.running(), timeout=30, what="the followers gone with their nodes")


def test_autostop_down_of_a_compact_cluster_leaves_only_the_policy_its_last_node_held(fast):
    """Compute Engine refuses to delete a placement policy a VM still uses, and the judge is such a VM:
    the (free) policy stays for `cluster down`, which removes it."""
    gcp = fast
    assert cli(*UP[:2], "tight", *UP[2:], "--autostop", "1m", "--down").exit_code == 0
    wait_for(lambda: not statuses(gcp, "tight"), timeout=120, what="the nodes gone")
    assert wait_for(lambda: leftovers(gcp) if "firewalls" not in leftovers(gcp) else None, timeout=30,
                    what="the teardown's end") == {"resourcePolicies": ["tight-placement"]}
    assert cli("cluster", "down", "tight", "--yes").exit_code == 0
    assert leftovers(gcp) == {}


@pytest.mark.slow
def test_busy_gpus_keep_a_cluster_without_a_job_running(fast):
    """Idle is judged on the GPUs too (the idle floor `metrics` uses): a node busy with work gcpgpu did not
    start (here: the emulator's activity record, which its Ops Agent metrics follow) is not stopped."""
    gcp = fast
    assert cli(*UP[:2], "gpu", *UP[2:], "--autostop", "1m").exit_code == 0
    iid = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "gpu-0")["id"]
    gcp.activity.begin(str(iid), "someone-elses-work", at=gcp.clock.now() - 300)  # minutes of GPU samples already
    seen = rounds(gcp, rounds(gcp))  # the leader judges the cluster
    gcp.clock.advance(8)  # four scaled minutes on, within the leader's lease
    rounds(gcp, seen)  # judged again since: an idle cluster would have been stopped
    assert set(statuses(gcp, "gpu").values()) == {"RUNNING"}
    gcp.activity.end(str(iid), "someone-elses-work")
    gcp.clock.advance(60)  # the Ops Agent's next sample, the first to show the GPUs idle
    wait_for(lambda: set(statuses(gcp, "gpu").values()) == {"TERMINATED"}, timeout=180, what="the cluster stopped")


SEEDED = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-emulator"  # the emulator's registry


def agents(gcp, cluster: str) -> dict[str, str | None]:
    out = {}
    for inst in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"):
        if inst["name"].startswith(f"{cluster}-"):
            out[inst["name"]] = {i["key"]: i["value"] for i in inst["metadata"].get("items", [])}.get("gcpgpu-agent")
    return out


def test_a_detached_job_of_another_image_runs_its_follower_from_the_last_gcpgpu_build(gcp):
    """Not gcpgpu-trainer:latest, a tag nothing pushes: as `cluster up --autostop`, the record of the last
    `container build`, else Artifact Registry's newest FLAVOR-* image; kept in the job's record for the
    nodes a recovery re-creates; and a node's follower image stays when it has one."""
    from gcpgpu.image import default as default_image

    gcp.jobs.agent.simulated_run_s = 30.0
    assert cli(*UP[:2], "det", *UP[2:]).exit_code == 0
    submitted = cli("job", "submit", "--cluster", "det", "--image", "busybox", "--detach")
    assert submitted.exit_code == 0, submitted.output
    assert agents(gcp, "det") == {"det-0": SEEDED, "det-1": SEEDED}  # no record here: the registry's newest
    job_id = submitted.stdout.splitlines()[0]
    items = {i["key"]: i["value"] for i in gcp.compute.get(PROJECT, "zones/us-central1-a/instances",
                                                           "det-0")["metadata"]["items"]}
    assert json.loads(items["gcpgpu-job"])["agent_image"] == SEEDED
    assert cli("job", "cancel", job_id).exit_code == 0

    default_image.remember(emulated=gcp.address, project=PROJECT, region="us-central1", flavor="none", image=BUILT)
    assert cli(*UP[:2], "rec", *UP[2:]).exit_code == 0
    assert cli("job", "submit", "--cluster", "rec", "--image", "busybox", "--detach").exit_code == 0
    assert agents(gcp, "rec") == {"rec-0": BUILT, "rec-1": BUILT}  # this machine's record of the last build

    # A node that already runs a follower (the autostop's) keeps its image.
    default_image.state_file(emulated=True).unlink()
    assert cli(*UP[:2], "kept", *UP[2:]).exit_code == 0
    assert agents(gcp, "kept") == {"kept-0": None, "kept-1": None}
    default_image.remember(emulated=gcp.address, project=PROJECT, region="us-central1", flavor="none", image=BUILT)
    assert cli("cluster", "autostop", "kept", "30m").exit_code == 0
    default_image.state_file(emulated=True).unlink()
    gcp.requests.clear()
    assert cli("job", "submit", "--cluster", "kept", "--image", "busybox", "--detach").exit_code == 0
    assert agents(gcp, "kept") == {"kept-0": BUILT, "kept-1": BUILT}
    assert not [r.path for r in gcp.requests.all() if "dockerImages" in r.path]  # nothing asked: it had one


def test_a_detached_job_with_no_gcpgpu_image_built_is_one_line_and_dry_run_asks_nothing(gcp):
    assert cli(*UP[:2], "bare", *UP[2:]).exit_code == 0
    gcp.requests.clear()
    dry = cli("job", "submit", "--cluster", "bare", "--image", "busybox", "--detach", "--dry-run", fmt="json")
    assert dry.exit_code == 0, dry.output
    pattern = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-*"
    assert json.loads(dry.stdout)["follower_image"] == pattern
    assert [r.path for r in gcp.requests.all() if r.method != "GET" or "dockerImages" in r.path] == []
    gcp.artifactregistry.seeded = False  # a project where `container build` never ran
    gcp.requests.clear()
    refused = cli("job", "submit", "--cluster", "bare", "--image", "busybox", "--detach")
    assert refused.exit_code == 2, refused.output
    assert len(refused.output.strip().splitlines()) == 1 and "gcpgpu container build" in refused.output
    assert [r.path for r in gcp.requests.all() if r.method != "GET"] == []
    # Its own image a gcpgpu one: nothing to look up.
    mine = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:mine"
    assert cli("job", "submit", "--cluster", "bare", "--image", mine, "--detach").exit_code == 0
    assert agents(gcp, "bare") == {"bare-0": mine, "bare-1": mine}
