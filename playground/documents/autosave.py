"""Where the window keeps its autosaved session, and how it knows the last window ended unexpectedly. Plain
files and the standard library only: no Qt, no model code.

    <data dir>/sessions/autosave.json       the current session, a trace (written atomically after each run or
                                            command, never per token: session_saver.py)
    <data dir>/sessions/autosave.prev.json  the one before it
    <data dir>/sessions/running.lock        the running window's pid, emptied when it closes cleanly

The data dir is platformdirs' user data dir for "token-playground"; TOKEN_PLAYGROUND_DATA overrides it (tests).
A window holds an advisory lock on running.lock while it runs: the kernel drops it when the process dies,
however it dies, so a second window sees a live one (and leaves its autosave alone) and the next start sees a
pid left behind by one that did not close (and offers to restore its session).
"""

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: a pid left in the marker alone decides (two windows at once are not told apart)
    fcntl = None

APP = "token-playground"
AUTOSAVE, PREVIOUS, MARKER = "autosave.json", "autosave.prev.json", "running.lock"
CLEAN, UNCLEAN, TAKEN = "clean", "unclean", "taken"  # what RunningMarker.claim found


DATA_ENV = "TOKEN_PLAYGROUND_DATA"  # a folder that replaces the user data dir (tests, the screenshot tool)


def data_dir() -> Path:
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override)
    import platformdirs

    return platformdirs.user_data_path(APP)


def sessions_dir() -> Path:
    return data_dir() / "sessions"


def autosave_path() -> Path:
    return sessions_dir() / AUTOSAVE


def previous_path() -> Path:
    return sessions_dir() / PREVIOUS


def marker_path() -> Path:
    return sessions_dir() / MARKER


def saved_sessions() -> list[Path]:
    """The autosaved sessions there are, the latest first."""
    return [path for path in (autosave_path(), previous_path()) if path.is_file()]


def rotate(directory: Path) -> None:
    """Keep autosave.json as autosave.prev.json before a new one is written. A hard link, not a move:
    autosave.json stays whole under its name until the new file replaces it, so a kill at any moment leaves the
    latest whole autosave there (on a file system without links it is moved: the previous one is read then)."""
    current, previous, link = directory / AUTOSAVE, directory / PREVIOUS, directory / f"{PREVIOUS}.link"
    if not current.is_file():
        return
    link.unlink(missing_ok=True)
    try:
        os.link(current, link)
    except OSError:
        os.replace(current, previous)
        return
    os.replace(link, previous)


class RunningMarker:
    """sessions/running.lock while this window runs: locked, holding the pid; emptied by release() on a clean
    close. claim() says what it found: CLEAN (no window ended unexpectedly), UNCLEAN (one did: its pid was left
    behind) or TAKEN (another window runs now: this one leaves the autosave to it)."""

    def __init__(self, path: Path | None = None):
        self.path = path or marker_path()
        self._fd: int | None = None
        self.left_by: int | None = None  # the pid an unclean exit left behind

    def claim(self) -> str:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by a command a rule runs
        if not _lock(fd):
            os.close(fd)
            return TAKEN
        left = os.read(fd, 32).decode("ascii", "replace").strip()
        self._fd = fd
        _rewrite(fd, str(os.getpid()))
        self.left_by = int(left) if left.isdigit() else None
        return UNCLEAN if left else CLEAN

    def peek(self) -> str:
        """What the marker says without claiming it (a data folder this process cannot write): UNCLEAN where a
        pid was left in it, else CLEAN."""
        try:
            left = self.path.read_bytes()[:32].decode("ascii", "replace").strip()
        except OSError:
            return CLEAN
        self.left_by = int(left) if left.isdigit() else None
        return UNCLEAN if left else CLEAN

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """A clean close: the marker is emptied (the next start offers nothing) and unlocked."""
        if self._fd is None:
            return
        _rewrite(self._fd, "")
        os.close(self._fd)  # the lock goes with the descriptor
        self._fd = None


def _lock(fd: int) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live window (this process's own included)
        return False
    return True


def _rewrite(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, text.encode("ascii"))
    os.fsync(fd)
