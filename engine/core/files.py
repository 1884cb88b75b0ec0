"""Files written atomically: a reader sees the old file or the new one, never half of one."""

import glob
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

_writes = threading.Condition()
_writing = 0  # atomic writes in progress in this process


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename over it: readers see the old or the new file.
    The temporary's name holds the writer's pid, so a writer killed midway leaves a file the next write
    recognises and removes."""
    atomic_write_blocks(path, (data,))


def atomic_write_blocks(path: Path, blocks: Iterable[bytes]) -> None:
    """atomic_write_bytes for a file written block by block: an exception from `blocks` (a check that fails,
    a cancel) leaves no file and no temporary behind."""
    global _writing
    path = Path(path)
    with _writes:  # a process ending at once (end_writes) waits for this write, and lets no new one start
        _writing += 1
    try:
        _remove_orphaned_temporaries(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.{os.getpid()}.", suffix=".tmp")
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; give it the usual mode
            with os.fdopen(fd, "wb") as f:
                for block in blocks:
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        with _writes:
            _writing -= 1
            _writes.notify_all()


def end_writes(timeout: float) -> bool:
    """For a process about to end at once (os._exit): wait up to `timeout` seconds for the atomic writes in
    progress in other threads to finish, then let no other start (a writer waits for good). False when one was
    still in progress (even then its file is whole: the old one stays until the rename)."""
    _writes.acquire()  # held from here on
    return _writes.wait_for(lambda: _writing == 0, timeout)


def _remove_orphaned_temporaries(path: Path) -> None:
    """Remove temporaries of `path` whose writing process no longer exists (killed before its rename)."""
    for stale in path.parent.glob(glob.escape(path.name) + ".*.tmp"):
        pid = stale.name[len(path.name) + 1 :].split(".", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)):
            stale.unlink(missing_ok=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # someone else's process, or not a pid at all
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
