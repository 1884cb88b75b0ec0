"""The layout's rules, checked on the source: the generic core imports no backend and no story-model code,
the engine imports no Qt, and the window uses only the engine's public face (`engine`, not its modules)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def import_statements(path: Path):
    """(module, [names]) for every import in a file, at the top or inside a function, as absolute names: `import a`
    gives ("a", []), `from .b import c` in package p gives ("p.b", ["c"])."""
    package = list(path.relative_to(ROOT).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else [])
            yield ".".join(part for part in (base, node.module or "") if part), [alias.name for alias in node.names]


def imported_modules(path: Path) -> set[str]:
    """Every module (or module.name) a file imports."""
    return {name for module, names in import_statements(path) for name in (module, *(f"{module}.{n}" for n in names))}


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", sources("engine/core"), ids=lambda p: p.name)
def test_the_core_imports_no_backend_and_no_story_model(path):
    outside = {
        m
        for m in imported_modules(path)
        if m == "engine" or m.startswith(("engine.backends", "engine.story", "engine.loading", "engine.__"))
    }
    assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


@pytest.mark.parametrize("path", sources("engine"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_imports_no_qt(path):
    qt = {m for m in imported_modules(path) if m.split(".")[0] in ("PySide6", "PyQt6", "pyqtgraph", "playground")}
    assert not qt, f"{path.relative_to(ROOT)} imports {sorted(qt)}"


@pytest.mark.parametrize("path", sources("playground"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_window_uses_only_the_engines_public_face(path):
    import engine

    inner = {m for m in imported_modules(path) if m.startswith("engine.") and m[len("engine.") :] not in engine.__all__}
    assert not inner, f"{path.relative_to(ROOT)} reaches into {sorted(inner)}"


def test_every_package_is_installed():
    """A folder of the engine or the window missing from pyproject's list would be left out of `pip install .`."""
    listed = (ROOT / "pyproject.toml").read_text()
    for init in [*(ROOT / "engine").rglob("__init__.py"), *(ROOT / "playground").rglob("__init__.py")]:
        package = ".".join(init.parent.relative_to(ROOT).parts)
        assert f'"{package}"' in listed, f"{package} is not in pyproject.toml's packages"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(folder: str) -> dict[str, set[str]]:
    """Each module of the folder -> the folder's modules it imports (TYPE_CHECKING imports too: they are a
    circle a reader has to untangle all the same). `from a import b` names module a.b where that is one."""
    modules = {module_name(path): path for path in sources(folder)}
    return {name: {m for m in imported_files(path, modules) if m != name} for name, path in modules.items()}


def imported_files(path: Path, modules) -> set[str]:
    """The modules among `modules` a file imports: `from package import module` is an edge to the module (a
    package's own __init__ runs first for any of its modules, so that is no edge of the file's)."""
    found = set()
    for module, names in import_statements(path):
        submodules = {f"{module}.{name}" for name in names} & set(modules)
        found |= submodules if names and len(submodules) == len(names) else {module} | submodules
    return found & set(modules)


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm), each sorted."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_circle_finder_finds_a_circle_and_no_false_one():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


@pytest.mark.parametrize("folder", ["engine", "playground"])
def test_no_import_circle(folder):
    assert import_circles(import_graph(folder)) == []


# The window's features: each folder holds one feature's panel, GUI side and worker-side commands. A feature imports
# the host (playground's top-level modules and widgets/) and the engine, never another feature: the host wires them.
FEATURES = (
    "chat",
    "compare",
    "inside",
    "documents",
    "models",
    "rules",
    "samplers",
    "seeds",
    "steer",
    "strip",
    "tree",
    "watch",
)


def feature_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in FEATURES else None


def test_every_feature_folder_is_listed():
    folders = {path.parent.name for path in (ROOT / "playground").glob("*/__init__.py")} - {"widgets"}
    assert folders == set(FEATURES)


def test_features_import_only_the_host_and_the_engine():
    crossing = [
        f"{module} imports {other}"
        for module, imported in import_graph("playground").items()
        if feature_of(module)
        for other in imported
        if feature_of(other) not in (None, feature_of(module))
    ]
    assert not crossing, crossing


def test_the_worker_host_imports_no_feature():
    """The worker knows its features only as the WorkerCommands it is given (features.py lists them)."""
    graph = import_graph("playground")
    for host in ("playground.worker", "playground.worker_thread", "playground.feature"):
        assert not [m for m in graph[host] if feature_of(m)], host


# The window's Qt-free parts: parsers, numbers, colours, what the GUI knows of the session. Tested without a window;
# none may import Qt, directly or through another module of the window.
QT_FREE = ("engines", "inside.shown", "palette", "prompt_check", "documents.autosave", "documents.document", "remembered", "run_speed",
           "samplers.parse", "session_view", "strip.measures", "token_text", "tree.numbers", "widgets.chart_rows",
           "widgets.token_colours")  # fmt: skip


def imports_qt(module: str, graph: dict[str, set[str]], paths: dict[str, Path], seen: frozenset = frozenset()) -> bool:
    direct = {m.split(".")[0] for m in imported_modules(paths[module])} & {"PySide6", "PyQt6", "pyqtgraph"}
    inner = graph[module] - seen - {"playground"}
    return bool(direct) or any(imports_qt(m, graph, paths, seen | {module}) for m in inner)


@pytest.mark.parametrize("module", QT_FREE)
def test_the_qt_free_parts_of_the_window_import_no_qt(module):
    paths = {module_name(path): path for path in sources("playground")}
    assert not imports_qt(f"playground.{module}", import_graph("playground"), paths)


# A module over the limit needs a line here with its count (none today): the test fails if one grows past it or a
# new one appears. Split a module before it gets there.
MAX_MODULE_LINES = 400
MODULES_OVER: dict[str, int] = {}


@pytest.mark.parametrize("folder", ["engine", "playground"])
def test_no_module_is_over_400_lines_but_the_known_ones(folder):
    over = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in sources(folder)
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    grown = {name: lines for name, lines in over.items() if lines > MODULES_OVER.get(name, MAX_MODULE_LINES)}
    assert not grown, f"over {MAX_MODULE_LINES} lines (allowed: {MODULES_OVER}): {grown}"


def called_on(receivers: set[str]) -> dict[str, set[str]]:
    """Method name -> the core's files that call it on a context or backend: `context.m(...)`,
    `self._context.m(...)`, `x.open_context().m(...)` for contexts; `model.m(...)`, `self.model.m(...)` for
    backends (attributes named in receivers)."""
    found: dict[str, set[str]] = {}
    for path in sources("engine/core"):
        if path.name == "contract.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", None)
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
                name = receiver.func.attr  # model.open_context().score_chunks(...)
            if name in receivers:
                found.setdefault(node.func.attr, set()).add(path.name)
    return found


def declared(*protocols: str) -> set[str]:
    from engine.core import contract

    return {name for protocol in protocols for name in dir(getattr(contract, protocol)) if not name.startswith("_")}


def test_every_method_the_core_calls_on_a_context_is_in_the_contract():
    called = called_on({"context", "_context", "open_context"})
    contexts = declared("LocalSampling", "HeadScaled", "ResidualSteered")
    missing = {m: sorted(files) for m, files in called.items() if m not in contexts}
    assert not missing, f"engine/core calls these on a context, but contract.py does not declare them: {missing}"


def test_every_method_the_core_calls_on_a_backend_is_in_the_contract():
    called = called_on({"model", "first_model", "second_model"})
    called.pop("get", None)  # a trace's "model" field is a dict (trace.py, replay.py)
    missing = {m: sorted(files) for m, files in called.items() if m not in declared("InsideBackend", "GrammarBackend")}
    assert not missing, f"engine/core calls these on a backend, but contract.py does not declare them: {missing}"


def test_each_backend_offers_the_methods_its_capabilities_promise():
    import engine
    from engine.backends.remote import RemoteContext, RemoteModel

    model = engine.load_model()  # the story model: every capability but grammar and streaming
    assert model.capabilities.full_distribution and model.capabilities.local_sampling and model.capabilities.inside
    context = model.open_context()
    assert declared("LocalSampling", "HeadScaled") <= set(dir(context))
    assert declared("InsideBackend") - {"tokenizer", "capabilities"} <= set(dir(model))
    assert declared("Context") <= set(dir(RemoteContext))  # a server: the base contract only
    assert not RemoteModel.capabilities.full_distribution and not RemoteModel.capabilities.inside
