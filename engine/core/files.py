"""Files written atomically: a reader sees the old file or the new one, never half of one."""

import glob
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename over it: readers see the old or the new file.
    The temporary's name holds the writer's pid, so a writer killed midway leaves a file the next write
    recognises and removes."""
    atomic_write_blocks(path, (data,))


def atomic_write_blocks(path: Path, blocks: Iterable[bytes]) -> None:
    """atomic_write_bytes for a file written block by block: an exception from `blocks` (a check that fails,
    a cancel) leaves no file and no temporary behind."""
    path = Path(path)
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
