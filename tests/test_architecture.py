"""The layout's rules, checked on the source: the generic core imports no backend and no story-model code,
the engine imports no Qt, and the window uses only the engine's public face (`engine`, not its modules)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """Every module (or module.name) a file imports, at the top or inside a function, as an absolute name."""
    package = list(path.relative_to(ROOT).parent.parts)
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else [])
            module = ".".join(part for part in (base, node.module or "") if part)
            names |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return names


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
