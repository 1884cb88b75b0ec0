"""Watch a server: File > Watch a server... shows a running `python -m engine serve`'s requests live."""
