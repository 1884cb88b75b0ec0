"""Structured output on the server: OpenAI's `response_format` (and the arguments of `tools`, engine/serve/tools.py)
made into a GBNF grammar the llama.cpp backend enforces token by token, so that what the model writes always parses.

- `response_format` {"type": "json_object"} is any JSON object; {"type": "json_schema", "json_schema": {"schema":
  ...}} is JSON that fits the schema, compiled by llama-cpp-python's converter (`json_schema_to_gbnf`, the port of
  llama.cpp's own `json-schema-to-grammar`: the one llama-server uses, already installed with the backend that
  runs grammars). A schema keyword the converter does not enforce is refused by name (a 400), never ignored.
"""

import json

# the keywords json_schema_to_gbnf enforces (SchemaConverter.visit), and those that describe without constraining
ENFORCED = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "oneOf",
    "anyOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "pattern",
    "format",
    "minLength",
    "maxLength",
}  # fmt: skip (not minimum / maximum: this converter writes no grammar for them)
DESCRIPTIVE = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "strict", "name",
               "deprecated", "readOnly", "writeOnly"}  # fmt: skip
MAX_SCHEMA_CHARS = 64_000
MAX_SCHEMA_DEPTH = 32  # nested schemas (a client's 10,000 levels would end the checker's recursion)


def checked_schema(schema, where: str) -> dict:
    """A JSON schema the converter enforces whole: every keyword (at any depth) one it enforces or one that only
    describes; ValueError naming the first other, and where it is."""
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a JSON schema (an object), got {type(schema).__name__}")
    try:
        size = len(json.dumps(schema))
    except (ValueError, RecursionError):
        raise ValueError(f"{where} is not a JSON schema this server reads") from None
    if size > MAX_SCHEMA_CHARS:
        raise ValueError(f"{where} is over {MAX_SCHEMA_CHARS:,} characters")
    _check_keywords(schema, where)
    return schema


def _check_keywords(schema, where: str, depth: int = 0) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError(f"{where}: schemas nest more than {MAX_SCHEMA_DEPTH} deep")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a schema (an object), got {json.dumps(schema)[:60]}")
    for key, value in schema.items():
        if key not in ENFORCED and key not in DESCRIPTIVE:
            allowed = ", ".join(sorted(ENFORCED))
            raise ValueError(f"{where}: the schema keyword {key!r} is not supported (a grammar enforces {allowed})")
        if key in ("properties", "$defs", "definitions"):
            if not isinstance(value, dict):
                raise ValueError(f"{where}.{key} must be an object of schemas")
            for name, sub in value.items():
                _check_keywords(sub, f"{where}.{key}.{name}", depth + 1)
        elif key in ("items", "additionalProperties") and isinstance(value, (dict, bool)):
            _check_keywords(value, f"{where}.{key}", depth + 1)
        elif key in ("oneOf", "anyOf", "allOf", "prefixItems"):
            if not isinstance(value, list):
                raise ValueError(f"{where}.{key} must be a list of schemas")
            for i, sub in enumerate(value):
                _check_keywords(sub, f"{where}.{key}[{i}]", depth + 1)


def schema_grammar(schema: dict) -> str:
    """GBNF for JSON that fits the schema (checked_schema first)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(f"the schema cannot be made into a grammar: {error}") from None


def response_grammar(response_format: dict | None) -> str | None:
    """OpenAI's response_format -> the grammar that enforces it (None: plain text)."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema") or {"type": "object"}  # llama-server's extra `schema` too
        return schema_grammar(checked_schema(schema, "response_format.schema"))
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise ValueError("response_format.json_schema must be an object with a `schema`")
        return schema_grammar(checked_schema(spec["schema"], "response_format.json_schema.schema"))
    raise ValueError(f"response_format.type must be text, json_object or json_schema, got {kind!r:.40}")
