"""Where Qt's xcb platform plugin cannot load (Debian 12 without libxcb-cursor0), `python -m playground` says in
one line what to install and exits 1, instead of Qt's wall of text and an abort from inside QApplication()."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.qt_platform import cannot_load_message, debian_package, xcb_problem

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb plugin is Linux's")


def xcb_plugin() -> Path:
    from PySide6.QtCore import QLibraryInfo

    plugin = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"
    if not plugin.is_file():
        pytest.skip("this PySide6 has no xcb plugin")
    return plugin


def test_a_library_the_xcb_plugin_cannot_load_is_said_in_one_line(tmp_path):
    """The loader meets an empty libxcb-cursor.so.0 first (LD_LIBRARY_PATH comes before the system's folders)
    and stops there, as it stops where the library is not installed: Qt would abort with its wall of text."""
    xcb_plugin()
    broken = tmp_path / "lib"
    broken.mkdir()
    (broken / "libxcb-cursor.so.0").write_bytes(b"")
    env = {name: value for name, value in os.environ.items()
           if name not in ("QT_PLUGIN_PATH", "QT_QPA_PLATFORM_PLUGIN_PATH", "WAYLAND_DISPLAY")}  # fmt: skip
    library_path = os.pathsep.join(filter(None, [str(broken), env.get("LD_LIBRARY_PATH")]))
    env |= {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0", "LD_LIBRARY_PATH": library_path}
    result = subprocess.run([sys.executable, "-m", "playground"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Token Playground cannot open its window: Qt's xcb platform plugin needs "
                               "libxcb-cursor.so.0"), lines[0]  # fmt: skip
    assert "sudo apt install libxcb-cursor0" in lines[0]
    assert "qt.qpa" not in result.stderr and result.stdout == ""


def test_no_display_is_said_as_it_is_in_one_line():
    """Before: Qt's paragraph about libxcb-cursor0 (installed) and an abort (134)."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")}  # fmt: skip
    result = subprocess.run([sys.executable, "-m", "playground"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no display was found" in lines[0] and "QT_QPA_PLATFORM=offscreen" in lines[0]


def test_help_is_printed_not_a_window_opened():
    env = {name: value for name, value in os.environ.items() if name != "DISPLAY"}  # a window would fail here
    result = subprocess.run([sys.executable, "-m", "playground", "--help"], env=env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith("usage: token-playground") and result.stderr == ""
    assert "token-playground serve" in result.stdout


def test_the_check_runs_only_where_qt_will_take_xcb():
    assert xcb_problem({"QT_QPA_PLATFORM": "offscreen"}) is None
    assert xcb_problem({"QT_QPA_PLATFORM": "wayland;xcb"}) is None
    assert xcb_problem({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}) is None  # a Wayland session
    assert xcb_problem({"XDG_SESSION_TYPE": "wayland"}) is None
    assert xcb_problem({"QT_QPA_PLATFORM": "xcb", "QT_QPA_PLATFORM_PLUGIN_PATH": "/elsewhere"}) is None


def test_the_line_names_every_missing_library_and_its_debian_package():
    error = "libxcb-cursor.so.0: cannot open shared object file: No such file or directory"
    assert cannot_load_message(error) == (
        "Token Playground cannot open its window: Qt's xcb platform plugin needs libxcb-cursor.so.0 "
        "(Debian, Ubuntu: sudo apt install libxcb-cursor0)"
    )
    assert cannot_load_message(error, ["libxcb-cursor.so.0", "libxcb-icccm.so.4"]).endswith(
        "needs libxcb-cursor.so.0, libxcb-icccm.so.4 (Debian, Ubuntu: sudo apt install libxcb-cursor0 libxcb-icccm4)"
    )
    assert "needs libxcb-cursor.so.0 " in cannot_load_message("/opt/lib/libxcb-cursor.so.0: file too short")
    assert cannot_load_message("undefined symbol: xcb_foo").endswith("cannot load (undefined symbol: xcb_foo)")
    assert [debian_package(name) for name in ("libxcb-keysyms.so.1", "libxkbcommon-x11.so.0", "libX11-xcb.so.1")] == [
        "libxcb-keysyms1",
        "libxkbcommon-x11-0",
        "libx11-xcb1",
    ]
