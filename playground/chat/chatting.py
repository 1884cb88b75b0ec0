"""The window's side of chat mode: the Conversation the prompt box's message joins (engine/core/chat.py). With
Chat format on, the prompt is the conversation and the box's message rendered through the model's own template
(PromptCheck asks `prompt_for`); Keep the reply makes that message and the reply written to it turns of the
conversation, so the next message follows them; Edit turn takes a turn and those after it back (a message of the
person's returns to the box). A new model starts a new conversation.

The whole chat is one session: Generate on a next (or edited) message goes on from the text shown (the worker's
ChatCommands.go_on inserts the turn, rewinding first to where an edited turn began), so the Tree holds every turn
and every reply; Regenerate branches where the reply began. The first message ends the session's prompt: editing
it, or a new system prompt, starts a session of its own."""

from dataclasses import replace

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QInputDialog

import engine

OFF = "Chat format is off: the prompt box is sent as it is. Tick Chat format to talk to the model in turns."
NO_TEMPLATE = "{name} has no chat template: the prompt box is sent as it is (plain mode)."


class Chatting(QObject):
    changed = Signal()  # the conversation changed (a session document holds it)
    conversationSet = Signal(object)  # to the worker: the conversation the session's trace carries (None: plain)
    goOn = Signal(int, str, object, bool)  # to the worker: steps kept, the next turn's text, settings, generate
    name = "chatting"

    def __init__(self, host):
        """host: the controller: its window, model, prompts (PromptCheck), the session view it knows, idle."""
        super().__init__(host)
        self.host, self.window = host, host.window
        self.panel, self.controls = host.window.chat_panel, host.window.controls
        self.conversation = engine.Conversation()
        host.prompts.prompt_for = self.prompt_for
        self.conversationSet.connect(host.worker.chat.set_conversation)
        self.goOn.connect(host.worker.chat.go_on)
        self.panel.keepRequested.connect(self.keep)
        self.panel.regenerateRequested.connect(self.regenerate)
        self.panel.editRequested.connect(self.edit)
        self.panel.deleteRequested.connect(self.delete)
        self.panel.clearRequested.connect(self.clear)
        self.panel.systemChanged.connect(self._changed)
        self.panel.budgetChanged.connect(lambda: self.refresh(changed=True))
        self.panel.toolTurnRequested.connect(self.tool_turn)
        self.panel.renderedShown.connect(lambda _shown: self.show_rendered())
        self.controls.prompt.textChanged.connect(self.show_rendered)
        self.controls.chat_format.toggled.connect(lambda _on: self.refresh())
        host.idle.connect(self.refresh)
        host.modelChanged.connect(self.model_changed)
        self.model_changed(host.model)

    def model_changed(self, model) -> None:
        """Another model: its template, its default system text; the turns of the last model's chat go."""
        self.conversation = engine.Conversation()
        self.panel.set_default_text(engine.default_system(model))
        self.panel.set_markers(*engine.reasoning_markers(model))
        self.refresh(changed=True)

    def now(self) -> engine.Conversation:
        """The conversation as the panel shows it (its system prompt as set there)."""
        return replace(
            self.conversation, system=self.panel.system_prompt(), thinking_budget=self.panel.thinking_budget()
        )

    def prompt_for(self, model, message: str) -> str:
        """The prompt a session gets in chat mode: the conversation, then the message as the user's turn (ValueError
        for a model without a template, as the prompt check shows it)."""
        return engine.chat_prompt(model, self.now().with_turn("user", message))

    def _plan(self) -> tuple[int, str] | None:
        """How the session shown goes on to read as the conversation and the box's message (engine.resume_at:
        steps kept, text to insert), or None: not chatting, no session to go on from, or another system prompt."""
        host, message, view = self.host, self.controls.prompt.toPlainText(), self.window.token_view
        if not self._chatting() or not message or not host.known.exists or host.traces.viewed is not None:
            return None
        try:
            target = self.prompt_for(host.model, message)
        except ValueError:  # no template, or one that refuses the conversation: the prompt check says why
            return None
        pieces = [step.token for step in view.steps()]
        text = view.text()
        return engine.resume_at(text[: len(text) - len("".join(pieces))], pieces, target)

    def reads_as_prompt(self) -> bool:
        """Whether the session shown is the chat's and reads as the conversation with the box's message (the reply to
        it, if any, after): Generate and Step carry on in it as they do on a plain prompt's session."""
        plan = self._plan()
        return plan is not None and not plan[1]

    def goes_on(self, request: dict, run: bool) -> bool:
        """Generate (run) or Step on the box's message in the chat's session: the next turn is inserted (after a
        rewind to where an edited turn began). False: a session of its own (the first message is the prompt's end,
        so editing it starts a new session, as a new system prompt does)."""
        plan = self._plan()
        if plan is None or not plan[1]:
            return False
        keep, text = plan
        self.host.rules.rulesSent.emit(request["rules"])
        self.goOn.emit(keep, text, request["settings"], run)
        return True

    def reply_steps(self) -> list:
        """The steps the model wrote to the box's message in the session shown (its end token left out): [] where
        the session shown is not the conversation with the message."""
        plan = self._plan()
        if plan is None or plan[1]:
            return []
        steps = self.window.token_view.steps(plan[0])
        return steps[:-1] if steps and steps[-1].token_id in self.host.model.end_token_ids else steps

    def reply(self) -> str | None:
        """What the model wrote to the box's message (its end token left out), or None."""
        return "".join(step.token for step in self.reply_steps()) or None

    def tool_turn(self) -> None:
        """The reply up to a tool's output (a command rule's insertion) becomes the assistant's turn, the output a
        tool turn, and the model answers after it: in the same session, a branch where the output began."""
        steps = self.reply_steps()
        at = next((i for i, step in enumerate(steps) if step.source == "tool"), None)
        if at is None or self.host.busy():
            return
        end = next((i for i in range(at, len(steps)) if steps[i].source != "tool"), len(steps))
        said, output = ("".join(step.token for step in part) for part in (steps[:at], steps[at:end]))
        message = self.controls.prompt.toPlainText()
        talk = self.conversation.with_turn("user", message).with_turn("assistant", said).with_turn("tool", output)
        view = self.window.token_view
        pieces = [step.token for step in view.steps()]
        text = view.text()
        try:
            target = engine.chat_prompt(self.host.model, replace(self.now(), turns=talk.turns))
        except ValueError as error:  # a template that takes no tool turn
            self.host.status(f"The chat template refused the tool turn: {error}", error=True)
            return
        plan = engine.resume_at(text[: len(text) - len("".join(pieces))], pieces, target)
        if plan is None or not plan[1] or self.host.settings_refused():
            return
        self.conversation = talk
        self.controls.prompt.setPlainText("")
        self.refresh(changed=True)
        settings = self.controls.settings()
        self.host.begin_run()
        self.goOn.emit(plan[0], plan[1], settings, True)

    def keep(self) -> None:
        reply = self.reply()
        if reply is None:
            return
        message = self.controls.prompt.toPlainText()
        self.conversation = self.conversation.with_turn("user", message).with_turn("assistant", reply)
        self.controls.prompt.setPlainText("")  # the next message
        self.refresh(changed=True)

    def regenerate(self) -> None:
        """Another reply to the box's message: the next seed, from where the reply began (a branch in the tree)."""
        if self.reply() is None:
            return
        keep = self._plan()[0]
        seed = self.controls.seed
        seed.setValue(seed.value() + 1 if seed.value() < seed.maximum() else 0)
        settings = self.controls.settings()
        self.host.branch_from(keep, {**settings, "max_new_tokens": keep + settings["max_new_tokens"]})

    def edit(self, index: int) -> None:
        """A message of the person's returns to the box (the turns from it on go); a reply or a tool's result is
        changed in place (the turns after it go: they answered the old one)."""
        if not 0 <= index < len(self.conversation.turns):
            return
        turn = self.conversation.turns[index]
        if turn.role == "user":
            self.conversation = replace(self.conversation, turns=self.conversation.turns[:index])
            self.controls.prompt.setPlainText(turn.content)
        else:
            text, ok = QInputDialog.getMultiLineText(self.window, "Edit turn", f"The {turn.role}'s turn:", turn.content)
            if not ok:
                return
            self.conversation = self.conversation.edited(index, text)
        self.refresh(changed=True)

    def delete(self, index: int) -> None:
        turns = self.conversation.turns
        if 0 <= index < len(turns):
            self.conversation = replace(self.conversation, turns=turns[:index] + turns[index + 1 :])
            self.refresh(changed=True)

    def clear(self) -> None:
        self.conversation = engine.Conversation()
        self.refresh(changed=True)

    def _changed(self) -> None:
        self.host.check_prompt()  # the prompt the box makes changed with the system prompt
        self.refresh(changed=True)

    def restore(self, data: dict | None) -> None:
        """A session document's conversation (checked when the file was read; None: none)."""
        conversation = engine.Conversation() if data is None else engine.Conversation.from_dict(data)
        self.conversation = engine.Conversation(conversation.turns, thinking_budget=conversation.thinking_budget)
        self.panel.default_system.setChecked(conversation.system is None)
        self.panel.system.setPlainText(conversation.system or "")
        self.panel.budget.setValue(-1 if conversation.thinking_budget is None else conversation.thinking_budget)
        self.refresh(changed=True)

    def _chatting(self) -> bool:
        chat = self.controls.chat_format
        return chat.isChecked() and chat.isEnabled()

    def refresh(self, changed: bool = False) -> None:
        """The tab as the conversation and the session shown are now; changed: the conversation itself changed."""
        if changed:
            self.changed.emit()
        self.conversationSet.emit(self.now().to_dict() if self._chatting() else None)
        model = self.host.model
        if not engine.has_template(model):
            self.panel.set_note(NO_TEMPLATE.format(name=model.name))
        else:
            self.panel.set_note("" if self._chatting() else OFF)
        turns = [(turn.role, turn.content) for turn in self.conversation.turns]
        steps = self.reply_steps()
        self.panel.show_turns(turns, "".join(step.token for step in steps) or None)
        self._show_reasoning(steps)
        self.show_rendered()

    def show_rendered(self) -> None:
        """The prompt the box's message makes, token by token, while its view is open (the template runs on each
        change of the box then: milliseconds)."""
        if not self.panel.rendered_toggle.isChecked():
            return
        model, message = self.host.model, self.controls.prompt.toPlainText()
        if not self._chatting() or not engine.has_template(model):
            self.panel.show_rendered([], "Chat mode is off or the model has no chat template: the prompt box is "
                                         "sent as it is.")  # fmt: skip
            return
        try:
            self.panel.show_rendered(engine.prompt_tokens(model, self.prompt_for(model, message)))
        except ValueError as error:
            self.panel.show_rendered([], str(error))

    def _show_reasoning(self, steps) -> None:
        """The reply's thinking apart from its answer (engine.split_thinking), and whether it holds a tool's output."""
        pieces = [step.token for step in steps]
        opening, closing, _own = engine.reasoning_markers(self.host.model)
        where, whole = engine.split_thinking(pieces, opening, closing), "".join(pieces)
        thinking, tokens, closed, answer = None, 0, False, whole
        if where is not None:
            start = whole.find(opening)
            close = whole.find(closing, start + len(opening))
            closed = close >= 0
            thinking = whole[start + len(opening) : close if closed else len(whole)]
            answer = whole[:start] + (whole[close + len(closing) :] if closed else "")
            tokens = where[2]
        tool = any(step.source == "tool" for step in steps)
        self.panel.show_reasoning(thinking, tokens, closed, answer.strip(), tool)
