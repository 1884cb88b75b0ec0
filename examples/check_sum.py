"""A small real test script for the CommandTool demonstration: exits 0 when its tests pass, 1 when not.

python examples/check_sum.py [--break]
"""

import sys


def add(a, b):
    return a - b if "--break" in sys.argv else a + b


def test_add():
    assert add(2, 3) == 5
    assert add(-1, 1) == 0


if __name__ == "__main__":
    try:
        test_add()
    except AssertionError:
        print("test_add failed", file=sys.stderr)
        sys.exit(1)
    print("test_add passed")
