"""The shape of a GBNF grammar, checked in Python before llama.cpp parses it (Settings does it for every grammar).

llama.cpp's parser recurses once per nested group (18,750 nested parentheses overflowed its stack: SIGSEGV) and
writes a repetition S{m,n} out in full: S m times, then n - m optional copies, each a rule of its own; with
m > n it counted n - m as a huge unsigned number and grew without limit (~270 MB/s). So: at most
MAX_GRAMMAR_DEPTH nested groups, repetition bounds m <= n <= MAX_REPETITION, and at most MAX_GRAMMAR_ELEMENTS
grammar elements once every repetition is written out (as llama.cpp counts them, roughly).

This is not a full parser: what it cannot read (a syntax error) it leaves to llama.cpp's own message, which the
backend reports from a separate process (engine/backends/llamacpp/grammar_probe.py).
"""

MAX_GRAMMAR_DEPTH = 64  # nested groups; JSON's grammar needs 4
MAX_REPETITION = 1000  # m and n of {m,n} (llama.cpp's own limit is 2000, with a less clear message)
MAX_GRAMMAR_ELEMENTS = 200_000  # once repetitions are written out: a few MB in llama.cpp
WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


class _Unreadable(Exception):
    """Not GBNF as this scanner reads it: llama.cpp says what is wrong."""


def check_grammar_shape(text: str) -> None:
    """ValueError when a grammar nests too deep, has a repetition out of bounds, or writes out too large."""
    scanner = _Scanner(text)
    try:
        scanner.grammar()
    except _Unreadable:
        pass  # a syntax error: llama.cpp reports it (its parser stops there, before expanding anything further)


class _Scanner:
    """llama.cpp's parser (llama-grammar.cpp: parse_rule, parse_alternates, parse_sequence), reading only what
    its checks need: the depth of groups, the bounds of repetitions, the number of elements written out."""

    def __init__(self, text: str):
        self.text, self.pos, self.elements = text, 0, 0

    def grammar(self) -> None:
        self.space(newlines=True)
        while self.pos < len(self.text):
            self.rule()

    def rule(self) -> None:
        self.name()
        self.space(newlines=False)
        if not self.text.startswith("::=", self.pos):
            raise _Unreadable
        self.pos += 3
        self.space(newlines=True)
        self.alternates(depth=0, nested=False)
        if self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
            raise _Unreadable
        self.space(newlines=True)

    def alternates(self, depth: int, nested: bool) -> None:
        self.sequence(depth, nested)
        while self.peek() == "|":
            self.pos += 1
            self.space(newlines=True)
            self.sequence(depth, nested)
        self.add(1)  # the rule's end

    def sequence(self, depth: int, nested: bool) -> None:
        last = 0  # the size of the last item: what a repetition after it copies
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "(":
                if depth + 1 > MAX_GRAMMAR_DEPTH:
                    raise ValueError(f"the grammar nests groups more than {MAX_GRAMMAR_DEPTH} deep: at most "
                                     f"{MAX_GRAMMAR_DEPTH} nested parentheses are allowed")  # fmt: skip
                self.pos += 1
                self.space(newlines=True)
                self.alternates(depth + 1, nested=True)
                if self.peek() != ")":
                    raise _Unreadable
                self.pos += 1
                last = 1
            elif char in "*+?{":
                self.repetition(last)
            else:
                size = self.item()
                if size is None:
                    return
                last = size
            self.add(last if char not in "*+?{" else 0)
            self.space(newlines=nested)

    def item(self) -> int | None:
        """One literal, character class, rule name, token or "." -> the elements it adds; None: no item here."""
        char = self.text[self.pos]
        if char == '"':
            return self.quoted('"')
        if char == "[":
            return self.quoted("]")
        if char in WORD:
            self.name()
            return 1
        if char == "." or char == "!" and self.text.startswith("<", self.pos + 1) or char == "<":
            self.pos = self.text.find(">", self.pos) + 1 if char != "." else self.pos + 1
            if self.pos == 0:
                raise _Unreadable
            return 1
        return None

    def repetition(self, last: int) -> None:
        """*, +, ? or {m}, {m,}, {m,n} after an item of `last` elements: checked, and counted as written out."""
        char = self.text[self.pos]
        self.pos += 1
        low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(char, (None, None))
        if char == "{":
            low, high = self.bounds()
        if last == 0:
            raise _Unreadable  # nothing before it to repeat
        optional = 1 if high is None else high - low
        self.add(last * (low - 1) + optional * (last + 3) + 1)

    def bounds(self) -> tuple[int, int | None]:
        self.space(newlines=False)
        low = self.number()
        self.space(newlines=False)
        high: int | None = low
        if self.peek() == ",":
            self.pos += 1
            self.space(newlines=False)
            high = self.number() if self.peek().isdigit() else None
            self.space(newlines=False)
        if self.peek() != "}":
            raise _Unreadable
        self.pos += 1
        shown = f"{{{low},{'' if high is None else high}}}"
        if max(low, high or 0) > MAX_REPETITION:
            raise ValueError(f"the grammar repeats an item {shown}: repetition bounds may be at most "
                             f"{MAX_REPETITION:,}")  # fmt: skip
        if high is not None and low > high:
            raise ValueError(f"the grammar repeats an item {shown}: the minimum must not exceed the maximum "
                             "({m,n} with m <= n)")  # fmt: skip
        return low, high

    def number(self) -> int:
        start = self.pos
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        if self.pos == start:
            raise _Unreadable
        digits = self.text[start : self.pos]
        return int(digits) if len(digits) <= 12 else MAX_REPETITION + 1  # a huge number is too many either way

    def quoted(self, end: str) -> int:
        """A literal "..." or a class [...] -> its characters (llama.cpp's elements: one per character)."""
        self.pos += 1
        count = 0
        while self.peek() != end:
            if not self.peek():
                raise _Unreadable
            self.pos += 2 if self.text[self.pos] == "\\" else 1
            count += 1
        self.pos += 1
        return max(count, 1)

    def name(self) -> None:
        start = self.pos
        while self.peek() in WORD and self.peek():
            self.pos += 1
        if self.pos == start:
            raise _Unreadable

    def space(self, newlines: bool) -> None:
        """llama.cpp's parse_space: blanks, # comments, and line ends where a newline does not end the rule."""
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in " \t" or newlines and char in "\r\n":
                self.pos += 1
            elif char == "#":
                while self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                return

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def add(self, count: int) -> None:
        self.elements += count
        if self.elements > MAX_GRAMMAR_ELEMENTS:
            raise ValueError(f"the grammar is too large once its repetitions are written out (over "
                             f"{MAX_GRAMMAR_ELEMENTS:,} elements, as llama.cpp counts them): repeat less")  # fmt: skip


def check_grammar_backend(model, grammar: str | None) -> None:
    """A grammar needs a backend with grammars, and must parse (ValueError with the backend's message)."""
    if grammar is None:
        return
    if not model.capabilities.grammar:
        raise ValueError(f"grammars need the llama.cpp backend; {model.name} cannot constrain its tokens to one")
    model.grammar(grammar).close()  # compiled once here to report a parse error now
