"""OpenAI's `tools` on the server, in one of two forms, each enforced by a grammar (engine/serve/structured.py) so
that a call's arguments always parse and fit the function's parameters:

- **the template's own** where the chat template writes tools itself in the Hermes form (Hermes 2 Pro, Qwen 2.5 and 3,
  and the many templates that copy them: `<tool_call>` in the template): the tools go to the template as `tools`,
  earlier calls and `tool` messages as the template reads them, and the model answers with
  `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, as it was trained to;
- **the generic JSON form** otherwise (as llama-server does for templates without tool support): the tools are
  described in a system message, and the model answers with one JSON object, `{"tool_call": {"name": ...,
  "arguments": {...}}}` or `{"response": "..."}`. Earlier calls and tool results are written back in that form.

`tool_choice` narrows either: "none" (no tools), "auto" (a call or an answer), "required" (a call), a named function.
"""

import json
import re
import uuid
from dataclasses import dataclass

from engine.serve.structured import checked_schema, schema_grammar

TOOL_PROMPT = ("You can call these tools (JSON schema of each one's arguments):\n{tools}\n"
               'Answer with one JSON object: {{"tool_call": {{"name": <a tool\'s name>, "arguments": {{...}}}}}} to '
               'call a tool, or {{"response": <your answer>}} to answer. Once a tool has returned what you need, '
               'answer with "response".')  # fmt: skip
OPEN, CLOSE = "<tool_call>", "</tool_call>"  # the Hermes form's markers
NATIVE_CALL = re.compile(re.escape(OPEN) + r"\s*(\{.*?\})\s*" + re.escape(CLOSE), re.DOTALL)


def takes_tools(template: str | None) -> bool:
    """Whether a chat template writes tools itself in the Hermes form (it reads `tools` and writes <tool_call>)."""
    return bool(template) and "tools" in template and OPEN in template


@dataclass(frozen=True)
class ToolPlan:
    """The tools a request offers, and the form the model answers in."""

    functions: tuple[dict, ...]  # {"name", "description", "parameters"} of each tool offered this turn
    required: bool  # a call must come ("required" or a named function)
    native: bool = False  # the template's own (Hermes) form, else the generic JSON form

    def system_text(self) -> str:
        tools = "\n".join(json.dumps(f, ensure_ascii=False) for f in self.functions)
        return TOOL_PROMPT.format(tools=tools)

    def openai_tools(self) -> list[dict]:
        """The tools as a template that takes them reads them (OpenAI's own shape)."""
        return [{"type": "function", "function": function} for function in self.functions]

    def grammar(self) -> str:
        defs, calls = {}, []
        for i, function in enumerate(self.functions):  # each one's $defs moved to the root, where "#/$defs/" points
            parameters = _hoisted(function["parameters"], f"f{i}_", defs)
            calls.append({"type": "object", "properties": {"name": {"const": function["name"]},
                                                           "arguments": parameters},
                          "required": ["name", "arguments"]})  # fmt: skip
        if self.native:
            return _native_grammar({"oneOf": calls, **({"$defs": defs} if defs else {})}, self.required)
        call = {"type": "object", "properties": {"tool_call": {"oneOf": calls}}, "required": ["tool_call"]}
        answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
        root = call if self.required else {"oneOf": [call, answer]}
        return schema_grammar({**root, "$defs": defs} if defs else root)

    def answer(self, text: str) -> tuple[str | None, list[dict]]:
        """What the model wrote -> (content, tool_calls). Text that is not the form (a run cut short by max_tokens)
        comes back as content, as written."""
        if self.native:
            calls = [_parsed(match.group(1)) for match in NATIVE_CALL.finditer(text)]
            if not calls or None in calls:
                return text, []
            content = NATIVE_CALL.sub("", text).strip()
            return content or None, [_call(call["name"], call.get("arguments", {})) for call in calls]
        data = _parsed(text)
        if isinstance(data, dict) and isinstance(data.get("tool_call"), dict):
            return None, [_call(data["tool_call"].get("name"), data["tool_call"].get("arguments", {}))]
        if isinstance(data, dict) and isinstance(data.get("response"), str):
            return data["response"], []
        return text, []


def _native_grammar(call_schema: dict, required: bool) -> str:
    """GBNF for the Hermes form: <tool_call> JSON that fits one function </tool_call>; where a call is not
    required, an answer in words instead (any text that does not open with "<")."""
    rules = schema_grammar(call_schema).replace("root ::=", "call-json ::=", 1)
    call = f'"{OPEN}\\n" call-json "\\n{CLOSE}"'
    root = f"root ::= {call}" if required else f"root ::= {call} | words\nwords ::= [^<] [^\\x00]*"
    return f"{root}\n{rules}"


def _parsed(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _call(name, arguments) -> dict:
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}  # fmt: skip


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


def tool_plan(tools: list | None, tool_choice, native: bool = False) -> ToolPlan | None:
    """OpenAI's tools and tool_choice -> the plan (None: no tools this turn); ValueError naming what is wrong.
    native: the chat template writes tools itself (takes_tools)."""
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
        return ToolPlan(tuple(functions), tool_choice == "required", native)
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if named not in names:
        raise ValueError(f'tool_choice must be "none", "auto", "required" or {{"type": "function", "function": '
                         f'{{"name": one of {names}}}}}, got {json.dumps(tool_choice)[:80]}')  # fmt: skip
    return ToolPlan(tuple(f for f in functions if f["name"] == named), True, native)


def template_input(messages: list[dict], plan: ToolPlan | None, native: bool) -> tuple[list[dict], list | None]:
    """(the messages, the tools) the chat template is given: as a template that takes tools reads them (calls'
    arguments as objects, tool messages as they are), else in the generic form (template_messages)."""
    if not native:
        return template_messages(messages, plan), None
    out = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        message.setdefault("content", "")
        if message.get("tool_calls"):
            message["tool_calls"] = [{**call, "function": {**call["function"], "arguments": _arguments(call)}}
                                     for call in message["tool_calls"]]  # fmt: skip
        out.append(message)
    return out, None if plan is None else plan.openai_tools()


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
