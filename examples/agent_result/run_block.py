"""A rule's command: run the last ```python block of the text so far (read on standard input) with pytest, and
exit with pytest's status (0: every test passed). The rule turns the status into " passed" or " failed".

A block that a client of the server wrote, rather than the model, is refused (exit status 3): the server marks
what its client sent (the prompt, a request's `steer`) in TOKEN_PLAYGROUND_CLIENT_TEXT, JSON [[start, end], ...]
character ranges of the text read here. It runs in the command's own empty folder (the server confines it)."""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
CLIENT_WROTE = 3  # the exit status for a block a client wrote


def client_wrote(block: re.Match, ranges: list) -> bool:
    """Whether any character of the block (its fences included) lies in a range a client wrote."""
    return any(start < block.end() and block.start() < end for start, end in ranges)


def main() -> int:
    text = sys.stdin.read()
    blocks = list(BLOCK.finditer(text))
    if not blocks:
        return 2  # nothing to run: not a pass
    ranges = json.loads(os.environ.get("TOKEN_PLAYGROUND_CLIENT_TEXT") or "[]")
    if client_wrote(blocks[-1], ranges):
        return CLIENT_WROTE
    with tempfile.TemporaryDirectory() as folder:
        test = Path(folder) / "test_block.py"
        test.write_text(blocks[-1].group(1), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                              cwd=folder, capture_output=True, timeout=50)  # fmt: skip
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
