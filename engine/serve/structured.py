"""Structured output on the server: OpenAI's `response_format` and `tools` made into a GBNF grammar the llama.cpp
backend enforces token by token, so that what the model writes always parses.

- `response_format` {"type": "json_object"} is any JSON object; {"type": "json_schema", "json_schema": {"schema":
  ...}} is JSON that fits the schema, compiled by llama-cpp-python's converter (`json_schema_to_gbnf`, the port of
  llama.cpp's own `json-schema-to-grammar`: the one llama-server uses, already installed with the backend that
  runs grammars). A schema keyword the converter does not enforce is refused by name (a 400), never ignored.
- `tools` go through the generic JSON form llama-server uses for chat templates without tool support: the tools
  are described in a system message, and the model answers with one JSON object, `{"tool_call": {"name": ...,
  "arguments": {...}}}` or `{"response": "..."}`, whose arguments fit the function's parameters (the grammar says
  so). `tool_choice` narrows it: "none" (no tools), "auto" (either), "required" (a call), a named function.
  Earlier tool calls and `tool` messages are written back in the same form for the template.
"""

import json
import uuid
from dataclasses import dataclass

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
TOOL_PROMPT = ("You can call these tools (JSON schema of each one's arguments):\n{tools}\n"
               'Answer with one JSON object: {{"tool_call": {{"name": <a tool\'s name>, "arguments": {{...}}}}}} to '
               'call a tool, or {{"response": <your answer>}} to answer. Once a tool has returned what you need, '
               'answer with "response".')  # fmt: skip


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


@dataclass(frozen=True)
class ToolPlan:
    """The tools a request offers, as the generic JSON form writes them."""

    functions: tuple[dict, ...]  # {"name", "description", "parameters"} of each tool offered this turn
    required: bool  # a call must come ("required" or a named function)

    def system_text(self) -> str:
        tools = "\n".join(json.dumps(f, ensure_ascii=False) for f in self.functions)
        return TOOL_PROMPT.format(tools=tools)

    def grammar(self) -> str:
        defs, calls = {}, []
        for i, function in enumerate(self.functions):  # each one's $defs moved to the root, where "#/$defs/" points
            parameters = _hoisted(function["parameters"], f"f{i}_", defs)
            calls.append({"type": "object", "properties": {"name": {"const": function["name"]},
                                                           "arguments": parameters},
                          "required": ["name", "arguments"]})  # fmt: skip
        call = {"type": "object", "properties": {"tool_call": {"oneOf": calls}}, "required": ["tool_call"]}
        answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
        root = call if self.required else {"oneOf": [call, answer]}
        return schema_grammar({**root, "$defs": defs} if defs else root)

    def answer(self, text: str) -> tuple[str | None, list[dict]]:
        """What the model wrote -> (content, tool_calls). Text that is not the form (a run cut short by max_tokens)
        comes back as content, as written."""
        try:
            data = json.loads(text)
        except ValueError:
            return text, []
        if isinstance(data, dict) and isinstance(data.get("tool_call"), dict):
            call = data["tool_call"]
            arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
            return None, [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                           "function": {"name": call.get("name"), "arguments": arguments}}]  # fmt: skip
        if isinstance(data, dict) and isinstance(data.get("response"), str):
            return data["response"], []
        return text, []


def _hoisted(schema: dict, prefix: str, defs: dict) -> dict:
    """A function's parameters with its own definitions ($defs, definitions) added to `defs` under `prefix` and
    its references pointed there: nested in the answer's schema, "#/$defs/X" would look in the wrong place."""
    own = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    renamed = {f"#/{where}/{name}": f"#/$defs/{prefix}{name}" for where in ("$defs", "definitions") for name in own}

    def pointed(node):
        if isinstance(node, dict):
            return {key: renamed.get(value, value) if key == "$ref" else pointed(value) for key, value in node.items()
                    if key not in ("$defs", "definitions") or node is not schema}  # fmt: skip
        return [pointed(item) for item in node] if isinstance(node, list) else node

    for name, definition in own.items():
        defs[prefix + name] = pointed(definition)
    return pointed(schema)


def tool_plan(tools: list | None, tool_choice) -> ToolPlan | None:
    """OpenAI's tools and tool_choice -> the plan (None: no tools this turn); ValueError naming what is wrong."""
    if not tools or tool_choice == "none":
        return None
    functions = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., "parameters": '
                             "{...}}}")  # fmt: skip
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        checked_schema(parameters, f"tools[{i}].function.parameters")
        functions.append({"name": function["name"], "description": str(function.get("description", "")),
                          "parameters": parameters})  # fmt: skip
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise ValueError("tools: each function needs a name of its own")
    if tool_choice in (None, "auto", "required"):
        return ToolPlan(tuple(functions), tool_choice == "required")
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if named not in names:
        raise ValueError(f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": '
                         f'{{"name": one of {names}}}}}, got {json.dumps(tool_choice)[:80]}')  # fmt: skip
    return ToolPlan(tuple(f for f in functions if f["name"] == named), True)


def template_messages(messages: list[dict], plan: ToolPlan | None) -> list[dict]:
    """The conversation as a template without tool support reads it: the tools described in the system message,
    earlier calls written in the JSON form, tool results as the user's turn (consecutive ones in one message, so
    templates that want user and assistant to alternate take them)."""
    out: list[dict] = []
    called = {}  # call id -> "name(arguments)", for the result's line
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = [{"tool_call": {"name": c["function"]["name"], "arguments": _arguments(c)}}
                     for c in message["tool_calls"]]  # fmt: skip
            content = "\n".join(json.dumps(c, ensure_ascii=False) for c in calls)
            for c, call in zip(message["tool_calls"], calls):
                called[c.get("id")] = f"{call['tool_call']['name']}({json.dumps(call['tool_call']['arguments'])})"
        elif role == "tool":
            which = called.get(message.get("tool_call_id"), "the tool")
            role, content = "user", f"{which} returned: {content}"
        if out and out[-1]["role"] == role == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + content}
        else:
            out.append({"role": role, "content": content})
    if plan is not None:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + plan.system_text()}
        else:
            out.insert(0, {"role": "system", "content": plan.system_text()})
    return out


def _arguments(call: dict):
    """A tool call's arguments as the client sent them back (a JSON string, as OpenAI writes them)."""
    text = call["function"].get("arguments") or "{}"
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text
