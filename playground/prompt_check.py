"""What a person types, checked against the model as it is typed: a prompt the model cannot take is flagged
at the offending character with the engine's message, and so is insert text. Only a model whose tokenizer
asks nobody is asked here, on the GUI thread; a server's checks the text when it is sent."""

import engine

TRAILING_SPACE = ("The prompt ends in a space: words are tokens that begin with their own space (' ball'), so "
                  "after a space the model has no word to write and often writes nonsense. Remove the space.")  # fmt: skip
HEAL_HINT = " Or turn on Heal the token boundary (Samplers tab): the model then spells the space itself."
EMPTY = "empty prompt: type something for the model to continue"
CHAT_KEY = "\x00chat\x00"  # before the text: the prompt rendered in the chat template is checked


class PromptCheck:
    def __init__(self, window, model):
        self.controls = window.controls
        self.insert_edit, self.insert_error = window.insert_edit, window.insert_error
        self.model = model
        self._checked = (None, None)  # (key, problem) of the last prompt checked
        self.prompt_for = lambda model, message: model.chat_prompt(message)  # chat mode's (playground/chat/ sets it)

    def set_model(self, model) -> None:
        self.model = model
        self._checked = (None, None)

    def prompt_ok(self) -> bool:
        """Check the prompt box (once per text) and mark what the model cannot take, or a trailing space."""
        controls = self.controls
        text = controls.prompt.toPlainText()
        healing = controls.samplers.values()["heal"]
        key = (self._chat_key(), healing, text)
        if key != self._checked[0]:
            problem, position = self._prompt_problem()
            warning = None
            if problem is None and not key[0] and not healing and text.endswith(" "):
                # allowed, but rarely what was meant (token healing lets the model spell the space itself)
                hint = HEAL_HINT if controls.samplers.heal.isEnabled() else ""
                warning, position = TRAILING_SPACE + hint, len(text) - 1
            self._checked = (key, problem)
            controls.show_prompt_error(problem or warning, position, warning=warning is not None)
        return self._checked[1] is None

    def prompt_text(self) -> str:
        """The prompt the session gets: the box's text, or with Chat format, that text as a user's turn in
        the model's chat template."""
        text = self.controls.prompt.toPlainText()
        if self._chat_format() and text:
            return self.prompt_for(self.model, text)  # the model these checks are for (a switch updates both)
        return text

    def insert_ok(self) -> bool:
        """Check the insert box's text; what the model cannot encode is named under it."""
        if not self.model.capabilities.local_tokenizer:
            return True
        try:
            self.model.tokenizer.encode(self.insert_edit.text())
        except ValueError as error:
            self.insert_error.setText(str(error))
            self.insert_error.show()
            return False
        self.insert_error.hide()
        return True

    def _chat_key(self) -> str:
        """In chat mode the whole prompt (the conversation's turns too) decides whether to check again."""
        if not self._chat_format():
            return ""
        try:
            return CHAT_KEY + self.prompt_text()
        except ValueError as error:  # _prompt_problem says it where the prompt is checked
            return CHAT_KEY + str(error)

    def _chat_format(self) -> bool:
        return self.controls.chat_format.isChecked() and self.controls.chat_format.isEnabled()

    def _prompt_problem(self) -> tuple[str | None, int | None]:
        """(the engine's message, the offending position) or (None, None) when the model can take it."""
        if not self.model.capabilities.local_tokenizer:  # tokenizing is a request: never from the GUI thread
            return (None, None) if self.prompt_text() else (EMPTY, None)
        try:
            prompt = self.prompt_text()
            ids = self.model.tokenizer.encode(prompt)
        except engine.UnknownCharacterError as error:
            return str(error), error.position
        except ValueError as error:
            return str(error), None
        if not prompt:
            return EMPTY, None
        context = self.model.context_length
        if len(ids) > context:
            return f"prompt of {len(ids)} tokens is longer than the {context} positions the model has", None
        return None, None
