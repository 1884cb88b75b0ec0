"""load_gguf: a GGUF file as a LlamaModel, from its float32 cache when one verifies (cache.py), else read
from the file (reader.py), which then writes the cache.
"""

from pathlib import Path

from engine.backends.gguf import checks as gguf_checks
from engine.backends.gguf.cache import cache_key, cache_root, cached_contents, prune_other_caches, write_cache
from engine.backends.gguf.header import check_gguf_file
from engine.backends.gguf.model import LlamaModel
from engine.backends.gguf.reader import end_tokens, file_sha256, read_gguf
from engine.backends.gguf.tokenizer import GGUFTokenizer


def load_gguf(path, context_length: int | None = None, progress=None, notice=None) -> LlamaModel:
    """Load a GGUF file; progress(done, total) is called while the first load dequantizes. The model gets
    the file's context, or context_length positions when fewer, at most gguf_checks.MAX_POSITIONS. A cache
    that does not verify is rebuilt, after notice(why) (default: a CacheRebuiltWarning)."""
    path = Path(path)
    check_gguf_file(path)
    gguf_checks.checked_context_request(context_length)
    directory = cache_root() / cache_key(path)
    cached = cached_contents(directory, notice)
    if cached is not None:
        config, weights, tokenizer, spec, name, sha = cached
    else:
        config, weights, spec, hf, name = read_gguf(path, progress)
        sha = file_sha256(path)
        write_cache(directory, config, weights, spec, hf, name, sha, source=str(path.resolve()))
        prune_other_caches(directory, str(path.resolve()))
        tokenizer = GGUFTokenizer(hf, spec)
    positions = gguf_checks.positions(config.context_length, context_length)
    return LlamaModel(config, weights, tokenizer, name, sha, end_tokens(spec), positions, source=str(path))
