"""The window's side of chat mode: the Conversation the prompt box's message joins (engine/core/chat.py). With
Chat format on, the session's prompt is the conversation and the box's message rendered through the model's own
template (PromptCheck asks `prompt_for`); Keep the reply makes that message and the reply written to it turns of
the conversation, so the next message follows them; Edit turn takes a turn and those after it back (a message of
the person's returns to the box). A new model starts a new conversation."""

from dataclasses import replace

from PySide6.QtCore import QObject, Signal

import engine

OFF = "Chat format is off: the prompt box is sent as it is. Tick Chat format to talk to the model in turns."
NO_TEMPLATE = "{name} has no chat template: the prompt box is sent as it is (plain mode)."


class Chatting(QObject):
    changed = Signal()  # the conversation changed (a session document holds it)
    name = "chatting"

    def __init__(self, host):
        """host: the controller: its window, model, prompts (PromptCheck), the session view it knows, idle."""
        super().__init__(host)
        self.host, self.window = host, host.window
        self.panel, self.controls = host.window.chat_panel, host.window.controls
        self.conversation = engine.Conversation()
        host.prompts.prompt_for = self.prompt_for
        self.panel.keepRequested.connect(self.keep)
        self.panel.regenerateRequested.connect(self.regenerate)
        self.panel.editRequested.connect(self.edit)
        self.panel.clearRequested.connect(self.clear)
        self.panel.systemChanged.connect(self._changed)
        self.controls.chat_format.toggled.connect(lambda _on: self.refresh())
        host.idle.connect(self.refresh)
        host.modelChanged.connect(self.model_changed)
        self.model_changed(host.model)

    def model_changed(self, model) -> None:
        """Another model: its template, its default system text; the turns of the last model's chat go."""
        self.conversation = engine.Conversation()
        self.panel.set_default_text(engine.default_system(model))
        self.refresh(changed=True)

    def now(self) -> engine.Conversation:
        """The conversation as the panel shows it (its system prompt as set there)."""
        return replace(self.conversation, system=self.panel.system_prompt())

    def prompt_for(self, model, message: str) -> str:
        """The prompt a session gets in chat mode: the conversation, then the message as the user's turn (ValueError
        for a model without a template, as the prompt check shows it)."""
        return engine.chat_prompt(model, self.now().with_turn("user", message))

    def reply(self) -> str | None:
        """What the model wrote to the box's message in the session shown (its end token left out), or None."""
        model, message = self.host.model, self.controls.prompt.toPlainText()
        if not self._chatting() or not message or not engine.has_template(model):
            return None
        try:
            if self.host.known.view.prompt != self.prompt_for(model, message):
                return None
        except ValueError:  # a template that refuses the conversation: the prompt check says why
            return None
        steps = self.window.token_view.steps()
        if steps and steps[-1].token_id in model.end_token_ids:
            steps = steps[:-1]
        return "".join(step.token for step in steps) or None

    def keep(self) -> None:
        reply = self.reply()
        if reply is None:
            return
        message = self.controls.prompt.toPlainText()
        self.conversation = self.conversation.with_turn("user", message).with_turn("assistant", reply)
        self.controls.prompt.setPlainText("")  # the next message
        self.refresh(changed=True)

    def regenerate(self) -> None:
        """Another reply to the box's message: the next seed, from the session's start (a branch in its tree)."""
        if self.reply() is None:
            return
        seed = self.controls.seed
        seed.setValue(seed.value() + 1 if seed.value() < seed.maximum() else 0)
        self.host.branch_from(0)

    def edit(self, index: int) -> None:
        if not 0 <= index < len(self.conversation.turns):
            return
        turn = self.conversation.turns[index]
        self.conversation = replace(self.conversation, turns=self.conversation.turns[:index])
        if turn.role == "user":
            self.controls.prompt.setPlainText(turn.content)
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
        self.refresh(changed=True)

    def _chatting(self) -> bool:
        chat = self.controls.chat_format
        return chat.isChecked() and chat.isEnabled()

    def refresh(self, changed: bool = False) -> None:
        """The tab as the conversation and the session shown are now; changed: the conversation itself changed."""
        if changed:
            self.changed.emit()
        model = self.host.model
        if not engine.has_template(model):
            self.panel.set_note(NO_TEMPLATE.format(name=model.name))
        else:
            self.panel.set_note("" if self._chatting() else OFF)
        turns = [(turn.role, turn.content) for turn in self.conversation.turns]
        self.panel.show_turns(turns, self.reply())
