"""Before QApplication: can Qt's xcb platform plugin load? Where it cannot (Debian 12 without libxcb-cursor0),
Qt prints a wall of text and aborts the process from inside QApplication(), so the app checks first and says
in one line what to install.

With no DISPLAY at all, Qt's same message blames libxcb-cursor0 though it is installed: that is said as it is
(no display) before anything is loaded. The check loads the plugin the way Qt would (dlopen of PySide6's own libqxcb.so, milliseconds): whatever
library is missing, the loader names it (and ldd, asked only then, names every one: Qt's own message names
libxcb-cursor0 whatever is missing). It runs only where Qt will pick xcb: QT_QPA_PLATFORM unset or xcb,
outside a Wayland session, with Qt's default plugin folder (a person who points QT_PLUGIN_PATH or
QT_QPA_PLATFORM_PLUGIN_PATH elsewhere gets Qt's own message).
"""

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

XCB_PLUGIN = "libqxcb.so"
NO_DISPLAY = ("Token Playground cannot open its window: no display was found (DISPLAY is not set). On a machine "
              "without a screen: xvfb-run token-playground, or QT_QPA_PLATFORM=offscreen (nothing shown); the "
              "engine needs none: python -m engine --help")  # fmt: skip
# dlerror(): "libxcb-cursor.so.0: cannot open shared object file: ...", or "/some/dir/libx.so.0: file too short"
_LIBRARY = re.compile(r"^(?:\S*/)?([\w.+-]+\.so(?:\.\d+)*): ")


def xcb_problem(environ=None) -> str | None:
    """One line saying what to install when the window would open through xcb and its plugin cannot load;
    None when it loads or another platform will be used."""
    environ = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or not _platform_is_xcb(environ):
        return None
    if environ.get("QT_PLUGIN_PATH") or environ.get("QT_QPA_PLATFORM_PLUGIN_PATH"):
        return None
    if not environ.get("DISPLAY"):  # Qt would blame the plugin's libraries though they are all there
        return NO_DISPLAY
    plugin = _default_xcb_plugin()
    if plugin is None:
        return None  # a Qt without the plugin: Qt says which platforms it has
    try:
        ctypes.CDLL(str(plugin))
    except OSError as error:
        return cannot_load_message(str(error), _missing_libraries(plugin))
    return None


def cannot_load_message(error: str, missing=()) -> str:
    """The line for the loader's error: the libraries missing (all of them where ldd could tell, else the one
    the loader stopped at) and the Debian/Ubuntu packages that hold them."""
    found = _LIBRARY.match(error)
    libraries = list(missing) or ([found.group(1)] if found else [])
    if not libraries:
        return f"Token Playground cannot open its window: Qt's xcb platform plugin cannot load ({error})"
    packages = " ".join(debian_package(library) for library in libraries)
    return (f"Token Playground cannot open its window: Qt's xcb platform plugin needs {', '.join(libraries)} "
            f"(Debian, Ubuntu: sudo apt install {packages})")  # fmt: skip


def _missing_libraries(plugin: Path) -> list[str]:
    """Every library the plugin needs that the loader cannot find (ldd's "not found"), in its order; none
    when ldd cannot tell. The loader itself stops at the first."""
    try:
        listing = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    missing = re.findall(r"^\s*(\S+) => not found", listing, flags=re.MULTILINE)
    return list(dict.fromkeys(missing))


def debian_package(library: str) -> str:
    """Debian's package name for a shared library: its name and soname version, with a dash between two
    digits (libxcb-cursor.so.0: libxcb-cursor0; libxkbcommon-x11.so.0: libxkbcommon-x11-0)."""
    name, _, version = library.partition(".so")
    version = version.lstrip(".").split(".")[0]
    dash = "-" if name[-1:].isdigit() and version else ""
    return f"{name}{dash}{version}".lower()


def _platform_is_xcb(environ) -> bool:
    """Whether Qt will try xcb first: QT_QPA_PLATFORM's first choice ("xcb", "xcb:options"), or, unset, an X11
    session (in a Wayland session Qt takes the wayland plugin first)."""
    chosen = environ.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen.split(";")[0].split(":")[0].strip() == "xcb"
    return environ.get("XDG_SESSION_TYPE") != "wayland" and not environ.get("WAYLAND_DISPLAY")


def _default_xcb_plugin() -> Path | None:
    from PySide6.QtCore import QLibraryInfo

    folder = QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)
    plugin = Path(folder) / "platforms" / XCB_PLUGIN
    return plugin if plugin.is_file() else None
