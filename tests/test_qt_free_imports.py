"""The window's Qt-free parts import without Qt at run time, in a fresh interpreter: the package's __init__ and
anything imported on the way count too (test_architecture checks the source; this checks what Python loads)."""

import subprocess
import sys
from pathlib import Path

import pytest
from test_architecture import QT_FREE

ROOT = Path(__file__).resolve().parent.parent
LOADS_QT = "import importlib, sys; importlib.import_module(sys.argv[1]); print(*sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'PyQt6', 'pyqtgraph')))"  # fmt: skip


@pytest.mark.parametrize("module", QT_FREE)
def test_a_qt_free_part_of_the_window_loads_no_qt_module(module):
    loaded = subprocess.run(
        [sys.executable, "-c", LOADS_QT, f"playground.{module}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == [], f"importing playground.{module} loads {loaded.stdout.split()[:5]}"
