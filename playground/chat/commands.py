"""Chat mode's commands in the worker. A chat is kept in one session: the next message goes on from where the text
stands (its turn inserted in the template's own words, then generated), an edited turn rewinds to where that turn
began first (the tree keeps the turns after it as a branch). The session carries the conversation, so its trace
does, and the thinking budget the person set (engine.Session.set_thinking_budget, between the model's reasoning
markers)."""

from PySide6.QtCore import Slot

import engine

from ..feature import WorkerCommands


class ChatCommands(WorkerCommands):
    name = "chat"

    def __init__(self, host):
        super().__init__(host)
        self.conversation: dict | None = None  # the window's Conversation.to_dict() in chat mode (None: plain)

    def session_changed(self, session) -> None:
        if session is not None and session.conversation is None:  # a replayed chat keeps its own
            session.conversation = self.conversation
            self._bound_thinking(session)

    @Slot(object)
    def set_conversation(self, conversation: dict | None) -> None:
        """The window sends the conversation each time it is idle: only a change reaches the session."""
        session = self.host.session
        if conversation == self.conversation and (session is None or session.conversation == conversation):
            return
        self.conversation = conversation
        if self.host.session is not None:
            self.host.session.conversation = conversation
            self._bound_thinking(self.host.session)

    def _bound_thinking(self, session) -> None:
        """The conversation's thinking budget in force in the session (logged where it changes)."""
        budget = None if self.conversation is None else self.conversation.get("thinking_budget")
        opening, closing, _own = engine.reasoning_markers(session.model)
        if session.thinking != (None if budget is None else (opening, closing, budget)):
            try:
                session.set_thinking_budget(opening, closing, budget)
            except ValueError as error:  # a tokenizer that cannot write the closing marker
                self.host.failed.emit(f"thinking budget: {error}")
                return
            self.host.publish()

    @Slot(int, str, object, bool)
    def go_on(self, keep: int, text: str, settings: dict, run: bool) -> None:
        """Keep the first `keep` steps, insert the next turn's text, and generate (run) or take one step, with up to
        Max new tokens of reply. Checked before anything changes: a turn the context has no room for changes
        nothing."""
        host = self.host

        def turn(session):
            room = session.model.context_length - len(session.prompt_ids) - keep
            if not 0 <= keep <= len(session.steps):
                raise ValueError(f"a chat goes on after 0 to {len(session.steps)} steps, not {keep}")
            if len(session.model.tokenizer.encode(text)) >= room:
                raise ValueError(f"the next turn does not fit: {room} tokens of context are left after the text")
            session.rewind(len(session.steps) - keep)
            session.insert_text(text)
            session.update_settings(**{**settings, "max_new_tokens": len(session.steps) + settings["max_new_tokens"]})

        if host.command(turn, emit=False, rewound=True):
            host.generate() if run else host.step_once(None)
