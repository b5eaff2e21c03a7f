"""The documentation agrees with the code: examples compile and import real names, links resolve, and every table
that describes code (keys, environment, exit codes, import order) is checked against it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from captcha_worker import cli, job, queue, worker  # noqa: F401 - queue registers the queue's scripts
from captcha_worker.config import WorkerConfig
from captcha_worker.queue import Keys
from captcha_worker.store import keys as store_keys
from captcha_worker.store import scripts as queue_scripts
from captcha_worker.worker_queue import WorkerQueue
from tests.helpers import ROOT

DOCS = [ROOT / "README.md", ROOT / "docs" / "producer.md", ROOT / "docs" / "operations.md"]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for i, code in enumerate(BLOCK.findall(path.read_text())):
            out.append((f"{path.relative_to(ROOT)}#{i}", code))
    return out


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_python_examples_compile_and_import_real_names(where: str, code: str) -> None:
    tree = compile(code, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("captcha_worker"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module} has no {alias.name}"


def test_docs_link_to_files_that_exist() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to missing {target}"


def test_readme_has_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_reliability_doc_has_a_row_for_every_chaos_scenario() -> None:
    """docs/reliability.md quotes each scenario the chaos suite records (Row("name", ...) and the parametrized
    refusals); a new scenario without its row, or a row whose scenario is gone, fails here."""
    sources = "\n".join(p.read_text() for p in (ROOT / "tests" / "chaos").glob("test_*.py"))
    scenarios = set(re.findall(r'Row\(f?"([a-z0-9-]+?)(?:-\{[a-z_]+\})?"', sources))
    scenarios |= set(re.findall(r'\("(redis-[a-z0-9-]+)", _', sources))
    for rows_tuple in re.findall(r"^ROWS = \((.*?)\)", sources, re.S | re.M):  # names built from parameters
        scenarios |= set(re.findall(r'"([a-z0-9-]+)"', rows_tuple))
    assert len(scenarios) >= 15, scenarios
    doc = (ROOT / "docs" / "reliability.md").read_text()
    rows = set(re.findall(r"^\| `([a-z0-9-]+?)(?:-[0-9]+)?` \|", doc, re.M))
    assert scenarios == rows, f"missing rows: {sorted(scenarios - rows)}; stale rows: {sorted(rows - scenarios)}"


# -- docs that would drift from the code: each table is checked against what it describes ---------------------
def _section(path: str, start: str, end: str) -> str:
    text = (ROOT / path).read_text()
    return text[text.index(start):text.index(end, text.index(start))]


def _key_shapes() -> dict[str, str]:
    """Every key `queue.Keys` makes, as the tables spell it: `{q}:pending`, `{q}:task:<id>`, ..."""
    keys = Keys("q")
    shapes = {name: getattr(keys, name) for name in ("pending", "processing", "leases", "orphans", "dead", "budget",
                                                     "limits", "workers", "reports", "tenants",
                                                     "keep_raw", "audit_turn", "audit")}
    shapes |= {"task": keys.task("<id>"), "result": keys.result("<id>"), "reply": keys.reply("<producer>"),
               "callback": keys.callback("<id>"), "waiting": keys.waiting("<tenant>"),
               "pingback": keys.pingback("<handle>"), "pingback_wake": keys.pingback_wake("<w>"),
               "raw": keys.raw("<sha256>")}
    shapes |= {name: getattr(keys, name) for name in ("spend_records", "spend_expiries", "spend_windows",
                                                     "spend_totals")}
    public = {n for n, v in vars(Keys).items() if isinstance(v, property | type(Keys.task)) and not n.startswith("_")}
    unlisted = {"own", "queue", "task_prefix", "result_prefix", "waiting_prefix", "raw_prefix"}
    assert public - unlisted == set(shapes), "a key of Keys is not listed here"
    return shapes


#: the task hash's fields the scripts write (`failures`/`deaths` by HINCRBY)
TASK_HASH_FIELDS = ("body", "failures", "deaths", "owner", "captcha_id", "captcha_until", "last_error", "state")


def test_both_key_tables_list_every_key_and_the_task_hash_fields() -> None:
    """docs/contracts.md's key table (called authoritative) and store/keys.py's header both list every key `Keys`
    makes, and the task hash's fields the scripts write."""
    header = store_keys.__doc__ or ""
    contracts = _section("docs/contracts.md", "## Redis keys", "## Metrics")
    for where, text, row in (("store/keys.py", header, r"^``(\{q\}:[^`]+)``"), ("docs/contracts.md", contracts,
                                                                            r"^\| `(\{q\}:[^`]+)` \|")):
        listed = set(re.findall(row, text, re.M))
        assert listed == set(_key_shapes().values()), f"{where}: {sorted(listed ^ set(_key_shapes().values()))}"
        at = text.index("{q}:task:<id>")
        task_row = text[at:text.index("{q}:result:<id>", at)]
        for field in TASK_HASH_FIELDS:
            assert f"`{field}`" in task_row, f"{where}: the task hash row lacks `{field}`"
    lua = "\n".join(queue_scripts.REGISTRY.values())
    for field in TASK_HASH_FIELDS:
        assert f"'{field}'" in lua or f'"{field}"' in lua, f"no script writes the task hash field {field}"


class _Recording(dict[str, str]):
    """An environment that remembers every name read from it."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def worker_env_read() -> set[str]:
    env = _Recording({"CAPTCHAAI_KEY": "0123456789abcdef0123456789abcdef", "CAPTCHAAI_THREADS": "4"})
    WorkerConfig.from_env(env)
    return env.read


def documented_env() -> set[str]:
    table = _section("docs/contracts.md", "## Worker environment", "## Simulator")
    names: set[str] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    return names


def test_the_environment_table_is_what_the_worker_reads() -> None:
    read, documented = worker_env_read(), documented_env()
    assert read == documented, (f"read but not documented: {sorted(read - documented)}; "
                                f"documented but never read: {sorted(documented - read)}")


def test_cli_exit_codes_are_documented() -> None:
    doc = (ROOT / "docs" / "contracts.md").read_text()
    line = next(ln for ln in doc.split("\n\n") if ln.startswith("Exit codes:"))
    codes = {v for n, v in vars(cli).items() if n.startswith("EXIT_") and isinstance(v, int)}
    assert codes == {0, 1, 2, 130}
    for code in codes:
        assert re.search(rf"\b{code} ", line), f"docs/contracts.md does not document exit code {code}"
        assert re.search(rf"\b{code} ", cli.__doc__ or ""), f"cli's docstring does not document exit code {code}"


def test_seed_guide_is_defined_once_and_linked_where_first_used() -> None:
    definition = "producer.md#migrating-from-the-seed-guides-worker"
    assert "The **seed guide** is" in (ROOT / "docs" / "producer.md").read_text()
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        if path.name == "producer.md":
            continue
        text = path.read_text()
        first = re.search(r"(?<!the-)seed[ -]guide", text, re.I)  # not the anchor of a link to the definition
        if first is None:
            continue
        paragraph_end = text.find("\n\n", first.start())
        assert definition in text[first.start():paragraph_end], (
            f"{path.relative_to(ROOT)}: the first 'seed guide' does not link to its definition ({definition})")


def _imports(module: str) -> set[str]:
    """The captcha_worker modules `module` imports, at the top or inside functions."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("captcha_worker"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if importlib.util.find_spec(f"{node.module}.{a.name}") is not None} if node.module == (
                "captcha_worker") else set()
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("captcha_worker")}
    return {m for m in found if m != "captcha_worker"}


def test_the_package_imports_run_one_way() -> None:
    """docs/architecture.md: imports run one way. No cycle among the top-level modules (lazy imports included;
    each sub-package, the simulator, the gateway, the store and the protocols, counts as one module)."""
    package = ROOT / "src" / "captcha_worker"
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    packages = [p.parent for p in package.glob("*/__init__.py")]
    modules = {f"captcha_worker.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {f"captcha_worker.{p.name}" for p in packages}
    assert {"captcha_worker.simulator", "captcha_worker.gateway", "captcha_worker.store"} <= modules
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for source in [*package.glob("*.py"), *(s for p in packages for s in p.rglob("*.py"))]:
        rel = source.relative_to(ROOT / "src").with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        if top(name) in graph:
            graph[top(name)] |= {top(m) for m in _imports(name)} - {top(name)}
    _assert_acyclic(graph)


def _assert_acyclic(graph: dict[str, set[str]]) -> None:
    for start in graph:  # a depth-first walk from every module: meeting `start` again is a cycle
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                assert nxt != start, f"import cycle: {' -> '.join([*trail, nxt])}"
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))


def _bench_imports(source: Path) -> set[str]:
    """The bench modules `source` imports (``from bench import x``, ``from bench.x import y``, ``import
    bench.x``), at the top or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "bench":
            found |= {f"bench.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("bench.")}
    return found


def test_the_benchmarks_import_one_way() -> None:
    """No import cycle among the bench/ modules either (bench.common and bench.venvs imported each other), and
    the package never imports them (its own graph above has no bench node to reach)."""
    graph = {f"bench.{p.stem}": _bench_imports(p) for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__"}
    assert "bench.venvs" in graph["bench.common"], "the scan finds bench.common's import of bench.venvs"
    assert {m for deps in graph.values() for m in deps} <= set(graph), "every bench import resolves to a file"
    _assert_acyclic(graph)
    for source in (ROOT / "src" / "captcha_worker").rglob("*.py"):
        assert not _bench_imports(source) and "import bench" not in source.read_text(), f"{source} imports bench"


def test_make_phony_names_only_targets_that_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY:(.*)$", makefile, re.M)[1].split())  # type: ignore[index]
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    assert phony == targets, f"not a target: {sorted(phony - targets)}; not .PHONY: {sorted(targets - phony)}"


def test_the_readme_documents_every_make_target() -> None:
    readme = (ROOT / "README.md").read_text()
    development = readme.split("## Development", 1)[1].split("\n## ", 1)[0]
    for target in ("unit", "test", "lint", "demo"):
        assert f"make {target}" in readme, f"README does not mention make {target}"
    assert "make unit" in development, "the inner loop belongs in the README's development section"


def test_production_code_never_imports_the_simulator() -> None:
    """The simulator is a test double: the worker, the gateway, the client and the planner run without it. Only
    the command line (its `simulator` command) and the demo (which runs one) reach it, and nothing imports those."""
    package = ROOT / "src" / "captcha_worker"
    runners = {"captcha_worker.cli", "captcha_worker.demo"}
    for source in package.rglob("*.py"):
        rel = source.relative_to(ROOT / "src").with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        if name.startswith("captcha_worker.simulator") or name in runners:
            continue
        imported = _imports(name)
        assert not {m for m in imported if m.startswith("captcha_worker.simulator")}, f"{name} imports the simulator"
        assert not imported & runners, f"{name} imports {imported & runners}"


#: the worker side: what runs in a worker process around the Worker (the queue's concrete type stays out of it)
WORKER_SIDE = ("worker", "job", "overflow", "pingback")
#: the one function of the worker side that builds the concrete queue (open_worker, the tests and bench call it)
QUEUE_BUILDER = "redis_queue"


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_workers_queue(node: ast.AST) -> bool:
    """`self.queue` (the Worker's) or `self.host.queue` (a job's Host's)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "queue"):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "self") or (
        isinstance(owner, ast.Attribute) and owner.attr == "host" and isinstance(owner.value, ast.Name)
        and owner.value.id == "self")


def _queue_members_called(module: str) -> set[str]:
    """The members `module` reads off the worker's queue; any other use of it (passed on, aliased) fails."""
    tree = ast.parse((ROOT / "src" / "captcha_worker" / f"{module}.py").read_text())
    parents, used = _parents(tree), set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_workers_queue(node) or isinstance(node.ctx, ast.Store):
            continue
        parent = parents[node]
        assert isinstance(parent, ast.Attribute) and parent.value is node, (
            f"{module}.py:{node.lineno} uses the queue other than by a WorkerQueue member: {ast.unparse(parent)}")
        used.add(parent.attr)
    return used


def test_the_worker_side_depends_on_the_queue_interface() -> None:
    """docs/architecture.md: the Worker and its jobs depend on ``worker_queue.WorkerQueue`` (SAQ's Queue), not on
    RedisQueue: the worker side names RedisQueue only where ``worker.redis_queue`` builds one, the Worker and the
    job's Host are annotated with the Protocol, and the Protocol lists exactly the members worker.py and job.py call
    (mypy checks the calls' signatures against it)."""
    for module in WORKER_SIDE:
        tree = ast.parse((ROOT / "src" / "captcha_worker" / f"{module}.py").read_text())
        builders = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == QUEUE_BUILDER]
        allowed = {id(n) for b in builders for n in ast.walk(b)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "RedisQueue":
                assert id(node) in allowed, f"{module}.py:{node.lineno} reaches RedisQueue outside {QUEUE_BUILDER}"
            if isinstance(node, ast.ImportFrom) and any(a.name == "RedisQueue" for a in node.names):
                assert module == "worker" and builders, f"{module}.py imports RedisQueue"
    assert typing.get_type_hints(worker.Worker.__init__)["queue"] is WorkerQueue
    assert typing.get_type_hints(job.Host)["queue"] is WorkerQueue
    members = {n for n in vars(WorkerQueue) if not n.startswith("_")}
    called = _queue_members_called("worker") | _queue_members_called("job")
    assert called <= members, f"called outside WorkerQueue: {sorted(called - members)}"
    assert members <= called, f"in WorkerQueue but called by neither worker.py nor job.py: {sorted(members - called)}"


# -- docs/architecture.md: the layers, the map and the path of one task are the code's -----------------------------
ARCHITECTURE = "docs/architecture.md"
PACKAGE = ROOT / "src" / "captcha_worker"
#: a row's line count may lag the file by this much before the map must be redrawn: 20 %, or 30 lines
LINES_SLACK, LINES_SLACK_MIN = 0.2, 30


def _map_rows() -> dict[str, tuple[int, int]]:
    """'Who owns what': module (``store/keys``) -> (its layer, the lines the row says)."""
    rows: dict[str, tuple[int, int]] = {}
    layer = 0
    for line in _section(ARCHITECTURE, "## Who owns what", "## The path of one task").splitlines():
        if heading := re.match(r"^### (\d)\. ", line):
            layer = int(heading[1])
        elif row := re.match(r"^\| `([a-z0-9_/]+)` \| ([\d,]+) \|", line):
            assert row[1] not in rows, f"{ARCHITECTURE}: two rows for {row[1]}"
            rows[row[1]] = (layer, int(row[2].replace(",", "")))
    return rows


def _package_modules() -> dict[str, Path]:
    return {p.relative_to(PACKAGE).with_suffix("").as_posix(): p for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py"}


def test_the_architecture_map_has_every_module_and_its_lines() -> None:
    """Every module of the package has one row in 'Who owns what', every row is a module, and its line count is the
    file's within the slack (a module that grew or shrank past it: redraw its row and what it owns)."""
    rows, modules = _map_rows(), _package_modules()
    assert set(rows) == set(modules), (f"{ARCHITECTURE}: no row for {sorted(set(modules) - set(rows))}; "
                                       f"rows that are no module: {sorted(set(rows) - set(modules))}")
    for name, (_, said) in rows.items():
        lines = len(modules[name].read_text().splitlines())
        assert abs(lines - said) <= max(LINES_SLACK_MIN, LINES_SLACK * lines), (
            f"{ARCHITECTURE}: {name} has {lines} lines, its row says {said}")


def _imported_modules(path: Path) -> set[str]:
    """The package modules `path` imports (``store/keys``, or a sub-package as ``gateway``), lazy and typing-only
    imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("captcha_worker"):
            for alias in node.names:
                sub = Path("src", *node.module.split("."), alias.name)
                is_module = (ROOT / sub).with_suffix(".py").is_file() or (ROOT / sub / "__init__.py").is_file()
                names.append(f"{node.module}.{alias.name}" if is_module else node.module)
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("captcha_worker")]
        found |= {n.removeprefix("captcha_worker").lstrip(".").replace(".", "/") for n in names}
    return found - {""}


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    """docs/architecture.md 'Layers': a module imports from its own layer and those below only (a sub-package
    imported whole counts as its highest module)."""
    rows = _map_rows()

    def layer(name: str) -> int:
        if name in rows:
            return rows[name][0]
        inside = [layer for module, (layer, _) in rows.items() if module.startswith(f"{name}/")]
        assert inside, f"{name} is neither a module of the map nor a package of its modules"
        return max(inside)

    modules = _package_modules()
    for name, (own, _) in rows.items():
        for dep in _imported_modules(modules[name]):
            assert layer(dep) <= own, (f"{name} (layer {own}) imports {dep} (layer {layer(dep)}): move one of them, "
                                       f"or redraw the layers in {ARCHITECTURE}")


def _resolves(dotted: str) -> bool:
    """`worker.Worker._claim_loop` names a module of the package and, after it, attributes that exist."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = "captcha_worker." + ".".join(parts[:cut])
        try:
            found: object = importlib.import_module(module)
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def test_every_name_the_architecture_doc_draws_exists() -> None:
    """In the intro, 'Layers', 'Who owns what' and 'The path of one task', every code-like name in backticks exists:
    a dotted name (``job.JobRunner._finish``) resolves in the package, a bare lower-case word is a module or
    sub-package, a ``.lua`` file is a script or library of store/lua/, a ``{q}:`` key is one ``Keys`` makes, and a
    relative path is a file or folder of the repository or the package. File names of other kinds (``in.php``),
    HTTP paths, upper-case names and phrases are prose."""
    text = _section(ARCHITECTURE, "# Architecture", "## Redis protocol and guarantees")
    shapes = [re.escape(s).replace(re.escape("<"), "<").replace(re.escape(">"), ">") for s in _key_shapes().values()]
    key_patterns = [re.compile("^" + re.sub(r"<[a-z0-9]+>", "[^:]+", s) + "$") for s in shapes]
    modules = {*_package_modules(), *(p.parent.name for p in PACKAGE.glob("*/__init__.py")), PACKAGE.name}
    lua = PACKAGE / "store" / "lua"
    checked = 0
    for name in re.findall(r"`([^`\n]+)`", text):
        if name.startswith("{q}:"):
            assert any(p.match(name) for p in key_patterns), f"{ARCHITECTURE}: no key of Keys is {name}"
        elif name.endswith(".lua") and name.count(".") == 1:
            assert (lua / name).is_file(), f"{ARCHITECTURE}: no script {name} in store/lua/"
        elif re.fullmatch(r"[a-z_][a-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+", name) and not re.search(
                r"\.(php|py|md|sh|json|yaml)$", name):
            assert _resolves(name), f"{ARCHITECTURE}: {name} names nothing in the package"
        elif re.fullmatch(r"[a-z_][a-z0-9_]*(/[a-z_][a-z0-9_]*)*", name):
            assert name in modules, f"{ARCHITECTURE}: {name} is no module of the package"
        elif "/" in name and not name.startswith("/") and " " not in name:
            assert (ROOT / name).exists() or (PACKAGE / name).exists(), f"{ARCHITECTURE}: no file or folder {name}"
        else:
            continue
        checked += 1
    assert checked >= 150, f"only {checked} names checked: has the doc's markup changed?"
