"""The generic core: the backend contract, the sampler chain, step records, the session, rules and traces.
It imports no backend and no story-model code (tests/test_architecture.py checks it)."""

__version__ = "0.1.0"  # the engine's version, recorded in every trace
