"""The launcher a rule's command runs through: `python -I -S confine.py KEY=VALUE... -- PROGRAM ARGS...` confines
itself, then becomes the program (exec), so that nothing the program does runs unconfined. Standard library only
(it runs with -I -S, before any package is importable), and few modules of it: its start is a command's cost
(json alone imports 7 ms of modules; the spec is KEY=VALUE words); one process, no threads, so the namespace
calls are safe.

What it does, each step where the OS allows it (`--probe` prints which ones took, as JSON):
- Linux: a user namespace (the same user id inside), a mount namespace in which every mount is read-only
  (mount_setattr, Linux 5.12+), an empty size-capped tmpfs as the working folder, empty read-only tmpfs over
  /run and /tmp/.X11-unix (the sockets of D-Bus, Docker, a display), and a network namespace of its own (no
  interface but a loopback that is down: no network at all). Refused namespaces (a kernel or container that
  forbids them) leave the rest in force.
- Every POSIX system: resource limits (CPU seconds, address space, file size, open files; processes where a
  user namespace counts them apart from the user's other processes).
- Windows: none of these (no resource module, no namespaces): the caller's empty folder and cleared
  environment only.
"""

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE, MS_RDONLY, MS_NOSUID, MS_NODEV = 0x1000, 0x4000, 0x40000, 0x1, 0x2, 0x4
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture Linux added it to after 5.12
HIDDEN = ("/run", "/tmp/.X11-unix", "/var/run/docker.sock")  # sockets a command could reach on a read-only mount


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def set_limits(spec: dict, own_processes: bool) -> list[str]:
    """Resource limits from spec (absent or None: left as they are) -> the names that took."""
    try:
        import resource
    except ImportError:  # Windows
        return []
    names = {"cpu_seconds": "RLIMIT_CPU", "memory_bytes": "RLIMIT_AS", "file_bytes": "RLIMIT_FSIZE",
             "open_files": "RLIMIT_NOFILE"}  # fmt: skip
    if own_processes:  # outside a user namespace RLIMIT_NPROC counts every process of the user
        names["processes"] = "RLIMIT_NPROC"
    took = []
    for key, name in names.items():
        value, limit = spec.get(key), getattr(resource, name, None)
        if value is None or limit is None:
            continue
        try:
            hard = resource.getrlimit(limit)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
            took.append(key)
        except (ValueError, OSError):
            pass  # the system refuses this limit (macOS's RLIMIT_AS): the others still hold
    return took


def enter_namespaces(folder: str, folder_bytes: int) -> list[str]:
    """Linux's confinement (see the module's docstring) -> what took: "user", "network", "read-only", "folder"."""
    if not sys.platform.startswith("linux"):
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0:
        return []
    took = ["user", "network"]
    try:  # the same ids inside: files the command writes are its user's
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError:
        return took
    mount = libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    if mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:  # nothing done here reaches the real mounts
        return took
    attr = MountAttr(attr_set=MOUNT_ATTR_RDONLY)
    everything = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    if everything == 0:
        took.append("read-only")
        for path in HIDDEN:
            if os.path.isdir(path):
                mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, b"size=4k,mode=555")
    size = f"size={folder_bytes},mode=700".encode()
    if mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size) == 0:
        took.append("folder")
    return took


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def confine(spec: dict) -> dict:
    """Everything above, in order -> {"namespaces": [...], "limits": [...]} (what took)."""
    namespaces = enter_namespaces(spec["folder"], spec["folder_bytes"])
    limits = set_limits(spec, own_processes="user" in namespaces)
    os.chdir(spec["folder"])
    return {"namespaces": namespaces, "limits": limits}


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: confine.py folder=PATH [KEY=INT...] -- PROGRAM [ARGS...]  |  ... -- --probe", file=sys.stderr)
        return 2
    split = argv.index("--")
    spec = dict(word.split("=", 1) for word in argv[1:split])
    spec = {key: value if key == "folder" else int(value) for key, value in spec.items()}
    took = confine(spec)
    program = argv[split + 1 :]
    if program == ["--probe"]:
        import json  # only here: what the probe prints

        print(json.dumps(took))
        return 0
    try:
        os.execvp(program[0], program)
    except OSError as error:
        print(f"[command could not run: {error.strerror or error}]")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
