"""A rule's command: run the last ```python block of the text so far (read on standard input) with pytest, and
exit with pytest's status (0: every test passed). The rule turns the status into " passed" or " failed"."""

import re
import subprocess
import sys
import tempfile
from pathlib import Path

BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def main() -> int:
    blocks = BLOCK.findall(sys.stdin.read())
    if not blocks:
        return 2  # nothing to run: not a pass
    with tempfile.TemporaryDirectory() as folder:
        test = Path(folder) / "test_block.py"
        test.write_text(blocks[-1], encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                              cwd=folder, capture_output=True, timeout=50)  # fmt: skip
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
