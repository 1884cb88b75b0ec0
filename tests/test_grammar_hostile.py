"""Grammars that took the process down, grew without limit or hung it (issue 25), and the grammar and bias
settings that were silently ignored: each is a ValueError saying what is allowed. What might crash runs in a
child process, so that a crash is a failed test and not a dead test run."""

import json
import random
import string
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import engine
from engine.core.gbnf import MAX_GRAMMAR_DEPTH, MAX_REPETITION

pytest.importorskip("llama_cpp")

DEEP = "root ::= " + "(" * 18_750 + '"a"' + ")" * 18_750  # 37.5k characters: under the 100,000 cap
BACKWARDS = 'root ::= "a"{3,1}'  # llama.cpp grew its memory ~270 MB/s for this
OPTIONAL = "root ::= " + " ".join(['"a"?'] * 300)  # a first step of over 90 s
YES_NO = 'root ::= ("yes" | "no") "."'

# Sessions made with each grammar (separated by NUL) in a child with 4 GB of address space
SESSIONS = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    import engine
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=256)
    for grammar in sys.stdin.read().split("\\0"):
        try:
            engine.Session(model, "Hi", max_new_tokens=2, grammar=grammar).run()
            print("ran", flush=True)
        except ValueError as error:
            print("refused:", error, flush=True)
""")


@pytest.fixture(scope="module")
def model(smollm2_llamacpp):
    return smollm2_llamacpp


def test_grammars_that_crashed_llamacpp_or_grew_its_memory_are_refused_before_it_parses_them():
    pytest.importorskip("resource")
    result = subprocess.run([sys.executable, "-c", SESSIONS], input="\0".join([DEEP, BACKWARDS, YES_NO]),
                            capture_output=True, text=True, timeout=180)  # fmt: skip
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-800:])
    assert result.stdout.splitlines() == [
        f"refused: the grammar nests groups more than {MAX_GRAMMAR_DEPTH} deep: at most {MAX_GRAMMAR_DEPTH} nested "
        "parentheses are allowed",
        "refused: the grammar repeats an item {3,1}: the minimum must not exceed the maximum ({m,n} with m <= n)",
        "ran",
    ]


def test_the_grammar_checks_say_what_is_allowed_and_change_nothing(model):
    nested = "root ::= " + "(" * MAX_GRAMMAR_DEPTH + '"a"' + ")" * MAX_GRAMMAR_DEPTH
    assert engine.Settings(grammar=nested).grammar == nested  # the deepest allowed
    for grammar in (f'root ::= "a"{{{MAX_REPETITION}}}', 'root ::= "a"{2,} "b"{0,3} "c"{4}', "root ::= [a-z]{1,5}"):
        assert engine.Settings(grammar=grammar).grammar == grammar
    refused = {
        "root ::= " + "(" * (MAX_GRAMMAR_DEPTH + 1) + '"a"' + ")" * (MAX_GRAMMAR_DEPTH + 1): "nests groups more",
        f'root ::= "a"{{{MAX_REPETITION + 1}}}': f"bounds may be at most {MAX_REPETITION:,}",
        f'root ::= "a"{{0,{10**30}}}': "bounds may be at most",
        'root ::= "a" (\n "b"{5,2})': r"\{5,2\}: the minimum must not exceed the maximum",
        'root ::= "' + "x" * 400 + '"{1000}': "too large once its repetitions are written out",
    }
    for grammar, message in refused.items():
        with pytest.raises(ValueError, match=message):
            engine.Settings(grammar=grammar)
    session = engine.Session(model, "Hi", max_new_tokens=2, grammar=YES_NO)
    with pytest.raises(ValueError, match="minimum must not exceed"):
        session.update_settings(grammar=BACKWARDS)
    assert session.settings.grammar == YES_NO and session.actions == []


def test_a_grammar_that_crashes_llamacpp_is_refused_by_its_probe_once_and_the_process_goes_on(model):
    """The probe compiles a new grammar in a child process: what no check foresaw cannot take the app down.
    (The checks would refuse this one first: the probe is given it directly.)"""
    from engine.backends.llamacpp.grammar_probe import check_grammar

    with pytest.raises(ValueError, match=r"llama.cpp crashed \(SIGSEGV\) compiling this grammar, in a separate"):
        check_grammar(model, DEEP)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="crashed"):  # remembered: the child is not started again
        check_grammar(model, DEEP)
    assert time.perf_counter() - started < 0.1
    with pytest.raises(ValueError, match=r"the grammar does not parse: expecting '\)'"):  # llama.cpp's message
        engine.Session(model, "Hi", grammar="root ::= (")


def test_a_grammar_whose_first_step_takes_too_long_is_refused_within_seconds(model):
    """ "a"? x300 took over 90 s a step, and Stop did nothing: the probe ends it after 2 s of its first step."""
    started = time.perf_counter()
    with pytest.raises(ValueError, match="llama.cpp took over 2 s to find the tokens this grammar allows"):
        engine.Session(model, "Hi", max_new_tokens=2, grammar=OPTIONAL)
    assert time.perf_counter() - started < 30  # the child's start, its parse, 2 s of its step (+1)


def test_stop_work_ends_a_grammar_step_between_chunks_of_the_vocabulary(model):
    """1,500 words as alternatives: every token is checked against each, a step of about 0.3 s of CPU spread
    over the whole vocabulary. stop_work ends it at the next chunk, not at the step's end."""
    letters = random.Random(1)
    words = sorted({"".join(letters.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(1500)})
    grammar = model.grammar("root ::= (" + " | ".join(f'"{word}"' for word in words) + ")+")
    try:
        started = time.perf_counter()
        whole = grammar.allowed()
        whole_s = time.perf_counter() - started
        ended = {}

        def step():
            try:
                grammar.allowed()
            except ValueError as error:
                ended["error"] = str(error)
            ended["at"] = time.perf_counter()

        worker = threading.Thread(target=step)
        worker.start()
        try:
            time.sleep(whole_s / 5)
            stopped = time.perf_counter()
            model.stop_work()
        finally:
            worker.join()
            model.stop_work(False)
        assert "stop_work" in ended["error"]
        assert ended["at"] - stopped < whole_s / 3, (ended["at"] - stopped, whole_s)
        assert grammar.allowed().tolist() == whole.tolist()  # and the next step is whole
    finally:
        grammar.close()


def test_a_grammar_that_allows_no_token_is_refused_not_ignored(model):
    """It generated unconstrained text with no word: "\\x00" is no token's text (llama.cpp refuses them)."""
    with pytest.raises(ValueError, match="the grammar allows no token of this model's vocabulary at its start"):
        engine.Session(model, "Say a", max_new_tokens=3, grammar=r'root ::= "\x00"')
    session = engine.Session(model, "Say a", max_new_tokens=3, grammar=r'root ::= "a" "\x00"')
    assert session.step().token == "a"
    with pytest.raises(ValueError, match="the grammar allows no token after the 1 tokens it has followed"):
        session.step()
    assert len(session.steps) == 1 and session.text == "Say aa"


def test_bans_of_every_token_are_refused_not_dropped(model):
    every = [[token_id, None] for token_id in range(model.vocab_size)]
    with pytest.raises(ValueError, match="logit_bias bans every token of the vocabulary"):
        engine.Session(model, "Hi", logit_bias=every)
    allowed = model.grammar(YES_NO)
    try:
        first = allowed.allowed().tolist()  # what the grammar allows as the first token
    finally:
        allowed.close()
    session = engine.Session(model, "Is the sky blue?", max_new_tokens=3, grammar=YES_NO,
                             logit_bias=[[token_id, None] for token_id in first])  # fmt: skip
    with pytest.raises(ValueError, match=f"logit_bias bans all {len(first)} tokens the grammar or the stages before"):
        session.step()  # it drew a banned token
    assert session.steps == []


# Hypothesis over grammars in a child process: nesting depth (a chain of groups up to 20,000 deep), repetitions
# ({m,n} up to 1,500 either way, on literals and classes; small ones on groups) and size (long literals).
# Each is refused by Settings (before llama.cpp sees it) or by llama.cpp's parser, or it compiles and takes two
# steps: the first token it allows is accepted and the next tokens found. A crash is the child's exit status.
SHAPES = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a runaway allocation ends the child, not the box
    from hypothesis import HealthCheck, given, settings, strategies as st
    import numpy as np
    import engine
    from engine.backends.llamacpp import library
    from engine.backends.llamacpp.grammar import _apply, compile_grammar, token_data

    llama = library.llama()
    params = llama.llama_model_default_params()
    params.vocab_only = True
    handle = llama.llama_model_load_from_file(str(engine.smollm2_path()).encode(), params)
    vocab = llama.llama_model_get_vocab(handle)
    size = llama.llama_vocab_n_tokens(vocab)
    counts = {"settings": 0, "llama.cpp": 0, "stepped": 0}

    def bounds(high):
        count = st.integers(0, 12) | st.integers(0, high)
        return st.sampled_from(["", "", "?", "*", "+"]) | st.tuples(count, count).map(
            lambda mn: "{%d}" % mn[0] if mn[0] == mn[1] else "{%d,}" % mn[0] if mn[1] == 0 else "{%d,%d}" % mn)

    literal = st.text("abxyz .", min_size=1, max_size=400).map(lambda t: '"%s"' % t)
    atom = st.one_of(literal, st.sampled_from(["[a-z]", "[^x]", ".", "[0-9 ]"]))
    item = st.tuples(atom, bounds(1500)).map("".join)

    def grouped(inner):
        alternatives = st.lists(st.lists(inner, min_size=1, max_size=4).map(" ".join), min_size=1, max_size=3)
        return st.tuples(alternatives.map(" | ".join), bounds(3)).map(lambda g: "(%s)%s" % g)

    body = st.recursive(item, grouped, max_leaves=8)
    depth = st.integers(0, 90) | st.integers(0, 20_000)  # 18,750 crashed llama.cpp's parser
    grammars = st.tuples(depth, st.lists(body, min_size=1, max_size=4).map(" ".join)).map(
        lambda dg: "root ::= " + "(" * dg[0] + dg[1] + ")" * dg[0])

    def allowed(sampler):
        data = token_data(size)
        data["id"] = np.arange(size)
        _apply(llama, sampler, data)
        return np.flatnonzero(np.isfinite(data["logit"]))

    @settings(max_examples=int(sys.argv[1]), deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(grammars)
    def shapes(grammar):
        try:
            engine.Settings(grammar=grammar)
        except ValueError:
            counts["settings"] += 1
            return
        try:
            sampler = compile_grammar(llama, vocab, grammar)
        except ValueError:
            counts["llama.cpp"] += 1
            return
        try:
            first = [t for t in allowed(sampler) if not llama.llama_vocab_is_eog(vocab, int(t))]
            if first:
                llama.llama_sampler_accept(sampler, int(first[0]))
                allowed(sampler)
            counts["stepped"] += 1
        finally:
            llama.llama_sampler_free(sampler)

    shapes()
    print(json.dumps(counts))
""")


def test_generated_grammars_are_refused_before_llamacpp_or_compile_and_step_without_crashing():
    pytest.importorskip("resource")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", SHAPES, "120"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stdout[-500:], result.stderr[-1500:])
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert sum(counts.values()) >= 100 and counts["settings"] >= 10 and counts["stepped"] >= 10, counts
    assert time.perf_counter() - started < 60
