"""An OpenAI-compatible server over the engine (`python -m engine serve`): every request a Session, the rules
acting between two inference passes. Needs the optional extra `[serve]` (FastAPI, uvicorn, sse-starlette);
nothing in engine/ imports this package otherwise."""
