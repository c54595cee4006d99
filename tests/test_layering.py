"""The house's shape (shared/ARCHITECTURE.md), kept by reading every module's imports with ast.

Data flows down: cli -> cluster / jobs / metrics -> gcp. The emulator (fakes/) and the trainer are
rooms of their own. Imports inside functions count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gcpgpu"
MAX_LINES = 500

# Room -> rooms it must never import (a room is gcpgpu.<first part>). Three places code runs: the
# user's machine (cli, cluster, jobs, metrics, image, gcp), the nodes and the image (node, trainer),
# the emulator (fakes). node/ may call the laptop side's verbs (as SkyPilot's skylet calls
# sky.provision), never the CLI; nothing on the laptop side imports node/. slurm/ is a node-side room
# too (what a Slurm cluster's nodes run: its configuration and daemons): the laptop reaches Slurm only
# through Google's APIs, so nothing on the laptop side imports it, and it uses the laptop's verbs as node/ does.
BASE_ABOVE = {"gcp", "cluster", "jobs", "metrics", "cli", "fakes", "trainer", "image", "node", "slurm", "storage",
              "pricing", "costs"}
FORBIDDEN = {
    "gcp": {"cluster", "jobs", "metrics", "cli", "fakes", "trainer", "image", "node", "slurm", "storage", "pricing",
            "costs"},
    # Prices (the Billing Catalog, its cache, the bundled fallback): over gcp/'s clients and the catalog, below
    # everything that prints a dollar figure.
    "pricing": {"cluster", "jobs", "metrics", "cli", "fakes", "trainer", "image", "node", "slurm", "storage", "costs"},
    # Shared file systems (Filestore, Lustre, Hyperdisk ML): a room below cluster/, which creates and
    # deletes them with the nodes, over gcp/'s clients; it knows nothing of clusters, jobs or nodes.
    "storage": {"cluster", "jobs", "metrics", "cli", "fakes", "trainer", "image", "node", "slurm", "costs"},
    "cluster": {"jobs", "metrics", "cli", "fakes", "image", "node", "slurm", "costs"},
    "image": {"cluster", "jobs", "metrics", "cli", "fakes", "node", "slurm", "storage", "costs"},
    "jobs": {"metrics", "cli", "fakes", "node", "slurm", "costs"},
    # What clusters and jobs cost, after they are gone too (the cost report, the records `down` keeps): above
    # both, whose COST SO FAR it sums; the CLI and the node's follower (autostop --down keeps a record) use it.
    "costs": {"metrics", "cli", "fakes", "node", "slurm", "image", "trainer"},
    "metrics": {"cli", "fakes", "node", "slurm", "costs"},
    "cli": {"slurm"},
    "node": {"cli", "fakes", "image"},
    "slurm": {"cli", "fakes", "image"},
    "trainer": {"gcp", "cluster", "jobs", "metrics", "cli", "fakes", "image", "node", "slurm", "storage", "pricing",
                "costs"},
    "nccl": BASE_ABOVE,
    "catalog": BASE_ABOVE,
    "errors": BASE_ABOVE,
    "output": BASE_ABOVE,
    "settings": BASE_ABOVE - {"gcp"},  # Settings.clients() builds the clients, lazily
    "specfile": BASE_ABOVE,
    "times": BASE_ABOVE,
    "clock": BASE_ABOVE,
    "resources": BASE_ABOVE,
}
# One module a room may import from a room it otherwise must not: the image's name and repository
# (image/name.py) are vocabulary, and the cluster room writes them into its nodes' follower setting
# (the metadata key, the stale tag); which image that is stays in image/follower.py, out of its reach.
# Such a module imports nothing of gcpgpu, so it carries nothing of its room along.
VOCABULARY = {"cluster": {"gcpgpu.image.name"}}
# The package root holds the shared base and nothing else; each new module finds a room.
MAX_ROOT_MODULES = 9
# What fakes/ may import of the rest is kept by tests/fakes/test_layering.py.


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every gcpgpu module `path` imports, at any depth (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("gcpgpu"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if not base.startswith("gcpgpu"):
                continue
            for alias in node.names:  # `from gcpgpu.x import y` may name a module y
                candidate = f"{base}.{alias.name}"
                out.add(candidate if _exists(candidate) else base)
    return {m for m in out if _exists(m)}


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle_among_gcpgpus_modules():
    graph = _graph()
    # Tarjan's strongly connected components: any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w == v or w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    # A package's __init__ importing its own submodules (and them importing a name from it) is how a
    # package re-exports; only cycles between distinct modules outside that count.
    assert cycles == [], f"import cycles: {cycles}"


# Old module names something still runs, each only importing its new home: nodes an older gcpgpu started run
# `python -m gcpgpu.nodeagent` from the image today's gcpgpu names for their follower (gcpgpu/nodeagent.py).
SHIMS = {"gcpgpu.nodeagent": "gcpgpu.node.agent"}


def test_no_room_imports_a_room_above_it():
    graph = _graph()
    assert {m: graph[m] for m in SHIMS} == {m: {new} for m, new in SHIMS.items()}
    wrong = [f"{m} imports {d}" for m, deps in graph.items() if m not in SHIMS for d in sorted(deps)
             if _room(d) in FORBIDDEN.get(_room(m), set()) and d not in VOCABULARY.get(_room(m), set())]
    assert wrong == []
    assert {v: graph[v] for names in VOCABULARY.values() for v in names} == {
        v: set() for names in VOCABULARY.values() for v in names}


def test_nothing_but_the_cli_the_demo_and_tests_reaches_the_emulator():
    allowed = {"fakes", "cli"}
    wrong = [f"{m} imports {d}" for m, deps in _graph().items() if _room(m) not in allowed for d in sorted(deps)
             if _room(d) == "fakes"]
    assert wrong == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it along what it holds"


def test_the_checker_sees_a_lazy_import_and_a_relative_one(tmp_path):
    """The walker must see imports inside functions and resolve `from ..x import y`, or the tests above
    would pass on any tree."""
    deps = _imports(PACKAGE / "cluster" / "doctor.py")
    assert "gcpgpu.cluster.observe" in deps  # imported inside check()
    assert "gcpgpu.gcp.operations" in deps


def test_the_package_root_holds_at_most_nine_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_ROOT_MODULES, f"{len(loose)} modules at gcpgpu/: {loose}; give the new ones a room"


# The image's preflight runs before torch starts and on every node of every job: it must not pull a
# Google client library, grpc or torch. Its own modules may not import one even lazily; the modules it
# reaches (the trainer's stdlib-only argv and dist parsers, nccl, catalog) not at import time.
PREFLIGHT = ("gcpgpu.node.launch", "gcpgpu.node.workspace")
HEAVY = ("google", "grpc", "torch", "numpy", "proto")


def _third_party(path: Path, lazy: bool) -> set[str]:
    """Top-level packages `path` imports: at module level, and inside functions too when `lazy`."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = ast.walk(tree) if lazy else _module_level(tree.body)
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out - {"gcpgpu"}


def _module_level(body: list[ast.stmt]):
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.ClassDef, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(stmt, field, []):
                    yield from _module_level(getattr(child, "body", [child]) if isinstance(child, ast.ExceptHandler)
                                             else [child])


def _heavy(reached: set[str]) -> list[str]:
    return sorted(f"{m} imports {lib}" for m in reached for lib in _third_party(_path(m), lazy=m in PREFLIGHT)
                  if lib in HEAVY)


def _closure(start: tuple[str, ...], graph: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(graph.get(module, ()))
        parts = module.split(".")  # importing a.b.c runs a/__init__ and a/b/__init__ first
        todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))
    return seen


def _path(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if (path / "__init__.py").is_file() else path.with_suffix(".py")


def test_the_preflight_imports_nothing_heavy():
    graph = _graph()
    reached = _closure(PREFLIGHT, graph)
    assert _heavy(reached) == []
    assert "gcpgpu.nccl" in reached and "gcpgpu.catalog" in reached  # the walk reaches the lazy imports


def test_the_preflight_check_sees_a_heavy_import():
    """The rule above must fail when the preflight reaches a Google client or a lazy torch, or it checks nothing."""
    graph = _graph()
    graph["gcpgpu.node.workspace"] = graph["gcpgpu.node.workspace"] | {"gcpgpu.trainer.model"}
    assert "gcpgpu.trainer.model imports torch" in _heavy(_closure(PREFLIGHT, graph))
    assert "google" in _third_party(PACKAGE / "node" / "upload.py", lazy=True)  # a verb apart from the preflight
    assert _third_party(PACKAGE / "trainer" / "dist.py", lazy=True) >= {"torch"}
    assert "torch" not in _third_party(PACKAGE / "trainer" / "dist.py", lazy=False)


# Inside jobs/: the target-neutral face (route, submit, follow, detail) hands each verb to a target's backend
# (vertex.py; cluster/ for a gcpgpu cluster's jobs, which hands it on to its scheduler's backend). A backend
# never imports the face above it nor another target; the rest of jobs/ (state, ids, spec, logs, goodput,
# steplines, policy, notify, usercode, workdir) is the vocabulary every target shares, and imports no target.
JOBS_FACE = {"gcpgpu.jobs.route", "gcpgpu.jobs.submit", "gcpgpu.jobs.follow", "gcpgpu.jobs.detail"}
JOBS_TARGETS = {"gcpgpu.jobs.vertex", "gcpgpu.jobs.cluster"}
MAX_JOBS_MODULES = 16
MAX_JOBS_CLUSTER_LINES = 400


def _target(module: str) -> str | None:
    return next((t for t in JOBS_TARGETS if module == t or module.startswith(t + ".")), None)


def test_jobs_targets_sit_under_the_face_and_beside_each_other():
    graph = _graph()
    jobs = {m: deps for m, deps in graph.items() if m.startswith("gcpgpu.jobs.")}
    wrong = [f"{m} imports {d}" for m, deps in jobs.items() for d in sorted(deps)
             if (_target(m) and (d in JOBS_FACE or (_target(d) and _target(d) != _target(m))))
             or (not _target(m) and m not in JOBS_FACE and _target(d))]
    assert wrong == []
    assert "gcpgpu.jobs.cluster.backend" in graph["gcpgpu.jobs.route"]  # the checker sees the lazy hand-over


def test_jobs_keeps_its_face_small_and_the_cluster_room_in_modules_under_four_hundred_lines():
    top = sorted(p.name for p in (PACKAGE / "jobs").glob("*.py"))
    assert len(top) <= MAX_JOBS_MODULES, f"{len(top)} modules at gcpgpu/jobs/: {top}"
    assert not (PACKAGE / "jobs" / "cluster.py").exists()
    long = {p.name: n for p in (PACKAGE / "jobs" / "cluster").glob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_JOBS_CLUSTER_LINES}
    assert long == {}


# Whether a cluster runs Slurm is its backend's business: the scheduler table (jobs/cluster/backend.py) names
# it, the Slurm backend (jobs/cluster/slurm.py) is it, and a record written before records named their
# scheduler is read as Slurm's by its queue fields (jobs/cluster/record.py). Nothing else in jobs/, nor the
# job commands, nor the node's follower asks.
SLURM_KNOWERS = {"jobs/cluster/backend.py", "jobs/cluster/slurm.py", "jobs/cluster/record.py"}


SLURM_FIELDS = {"queue", "slurm_id", "slurm_nodes", "by_hand", "SCHEDULER_KEY"}


def _asks_about_slurm(path: Path) -> list[str]:
    """Code in `path` that asks whether a job or cluster runs Slurm: a comparison with 'slurm' or with a
    scheduler field, a read of a record's Slurm fields (attribute, subscript or .get), a Slurm predicate, a
    name that says Slurm. Passing a scheduler's name along, messages, help texts and column titles ask nothing."""
    def slurmy(node: ast.AST, compared: bool = False) -> bool:
        name = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else \
            node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        field = name in SLURM_FIELDS and not isinstance(node, ast.Name)  # a record's, not a module (queue.Queue)
        return "slurm" in name.lower() or field or name in ("runs_slurm", "is_queued") or \
            (compared and "scheduler" in name.lower())

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        asks = (isinstance(node, ast.Compare) and any(slurmy(n, True) for n in (node.left, *node.comparators))) or \
            (isinstance(node, (ast.Attribute, ast.Name)) and slurmy(node)) or \
            (isinstance(node, ast.Subscript) and slurmy(node.slice)) or \
            (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
             and node.args and slurmy(node.args[0]))
        if asks:
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_only_the_slurm_backend_asks_whether_a_job_runs_slurm():
    paths = [*sorted((PACKAGE / "jobs").rglob("*.py")), PACKAGE / "cli" / "job.py", PACKAGE / "node" / "agent.py"]
    asked = [line for p in paths if str(p.relative_to(PACKAGE)) not in SLURM_KNOWERS for line in _asks_about_slurm(p)]
    assert asked == []
    assert _asks_about_slurm(PACKAGE / "jobs" / "cluster" / "slurm.py")  # the check sees code that does
