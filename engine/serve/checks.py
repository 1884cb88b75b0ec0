"""A request's checks on the server: a 400 that names the field (BadRequest), the engine's ValueError made one
(guarded), and the model a request names (checked_model)."""

import re

# the engine's names for what a request names otherwise, for the error's `param`
PARAM_NAMES = {"max_new_tokens": "max_tokens", "dry_last_n": "dry_penalty_last_n", "rules": "steer",
               "grammars": "grammar"}  # fmt: skip


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


def checked_model(body, names: list[str]) -> None:
    """The request names the served model (any of its names) and asks for nothing this server does not serve
    (else a 400)."""
    refused = body.unsupported()
    if refused is not None:
        raise BadRequest(refused[1], refused[0])
    asked = body.model
    if asked.lower() not in (name.lower() for name in names):
        said = ", ".join(repr(name) for name in names)
        raise BadRequest(f"model: this server serves {names[0]!r} (also called {said}), not {asked!r} "
                         "(GET /v1/models)", "model")  # fmt: skip


def guarded(make, param: str | None = None, fields=()):
    """make() with the engine's ValueError as a 400: param, or else the first of the request's fields that
    the message names (the engine's messages name the setting: "temperature must be ...")."""
    try:
        return make()
    except ValueError as error:
        message = str(error)
        names = {name: name for name in fields if name != "model"} | PARAM_NAMES  # "model" is checked apart
        named = sorted((m.start(), field) for name, field in names.items() if (m := re.search(rf"\b{name}\b", message)))
        raise BadRequest(message, param or (named[0][1] if named else None)) from None
