"""A model file's chat template (jinja2), rendered within limits: a template is code from the file, and one that
recurses, loops or grows without end must be a ValueError within a second, not a hang or a MemoryError.

Rendering runs in jinja2's immutable sandbox (no attribute of Python internals, no mutation, `range` at most
100,000 items), under a deadline that a line tracer checks in the template's own code (a loop in the template
ends at RENDER_SECONDS), with its output counted as it is made (MAX_OUTPUT_CHARS), and with the ways one
expression makes a huge value bounded: `*` and `**`, and any int argument of a call or filter (a padding width,
a repeat count) above MAX_OUTPUT_CHARS. Recursion ends in RecursionError, caught. A template that fails a limit
is dropped when the model loads (`checked_template`: the model then has no chat format, and says why), so
the window never renders it; one that fails later says so, and every later call says the same at once.
"""

import functools
import sys
import time

import jinja2
import jinja2.sandbox

RENDER_SECONDS = 1.0  # one rendering's time, at most
MAX_OUTPUT_CHARS = 1_000_000  # a rendered prompt's characters (and any one value an expression makes), at most
MAX_TEMPLATE_CHARS = 200_000  # a template's source (real ones are a few thousand characters)
MAX_POWER_BITS = 100_000  # bits of an int that ** makes
PROBE = [{"role": "user", "content": "Hello"}]  # what a template is tried with when the model loads


class TemplateLimit(ValueError):
    """A chat template ran past a limit (time, output, recursion, memory)."""


def checked_template(source: str | None, bos_text: str, eos_text: str) -> tuple[str | None, str | None]:
    """(the template, None), or (None, why it is not used) for one that fails a limit on a plain user's turn.
    A template that raises an error of its own (roles that must alternate) is kept: that depends on the turn."""
    if not source:
        return None, None
    try:
        render(source, PROBE, bos_text, eos_text)
    except TemplateLimit as error:
        return None, f"the model's chat template is not used: {error}"
    except ValueError:
        pass
    return source, None


def render(source: str, messages: list[dict], bos_text: str, eos_text: str, tools: list | None = None) -> str:
    """The template rendered for these messages (with the generation prompt; tools: OpenAI's tools, for a
    template that takes them), or ValueError: TemplateLimit where it ran past a limit, else the template's own
    error."""
    template = _compiled(source)
    output, size = [], 0
    tracer = _deadline_tracer(time.monotonic() + RENDER_SECONDS)
    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        for chunk in template.generate(messages=messages, add_generation_prompt=True, bos_token=bos_text,
                                       eos_token=eos_text, **({"tools": tools} if tools else {})):  # fmt: skip
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateLimit(f"it wrote more than {MAX_OUTPUT_CHARS:,} characters")
            output.append(chunk)
    except RecursionError:
        raise TemplateLimit("it recursed too deeply") from None
    except MemoryError:
        raise TemplateLimit("it ran out of memory") from None
    except (jinja2.TemplateError, ArithmeticError, TypeError, AttributeError) as error:
        raise ValueError(f"the model's chat template failed: {error}") from None
    finally:
        sys.settrace(before)
    return "".join(output)


@functools.lru_cache(maxsize=8)
def _compiled(source: str) -> jinja2.Template:
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateLimit(f"it is {len(source):,} characters long, more than {MAX_TEMPLATE_CHARS:,}")
    try:
        return _Bounded(trim_blocks=True, lstrip_blocks=True).from_string(source)
    except RecursionError:
        raise TemplateLimit("it nests too deeply") from None
    except jinja2.TemplateError as error:
        raise ValueError(f"the model's chat template failed: {error}") from None


def _deadline_tracer(deadline: float):
    """A tracer for the template's own lines (jinja2 compiles it to Python named "<template>")."""

    def line(frame, event, arg):
        if time.monotonic() > deadline:
            raise TemplateLimit(f"it ran longer than {RENDER_SECONDS:g} s")
        return line

    def call(frame, event, arg):
        return line if frame.f_code.co_filename == "<template>" else None

    return call


def _check_size(value) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_OUTPUT_CHARS:
        raise TemplateLimit(f"it asked for {value:,} of something (at most {MAX_OUTPUT_CHARS:,})")


class _Bounded(jinja2.sandbox.ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, **options):
        super().__init__(**options)
        self.filters = {name: _bounded_filter(f) for name, f in self.filters.items()}

    def call_binop(self, context, operator, left, right):
        if operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                if abs(left) > 1 and right * abs(left).bit_length() > MAX_POWER_BITS:
                    raise TemplateLimit(f"it raised a number to the power {right:,}")
        elif isinstance(left, (str, list, tuple)) and isinstance(right, int):
            _check_size(len(left) * right)
        elif isinstance(right, (str, list, tuple)) and isinstance(left, int):
            _check_size(len(right) * left)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own signature
        for value in (*args, *kwargs.values()):
            _check_size(value)
        return super().call(__context, __obj, *args, **kwargs)


def _bounded_filter(function):
    @functools.wraps(function)  # keeps jinja2's pass_context / pass_environment marks
    def bounded(*args, **kwargs):
        for value in (*args, *kwargs.values()):
            _check_size(value)
        return function(*args, **kwargs)

    return bounded
