"""The Steer panel's commands in the worker: a direction made from contrast prompts (engine.steering_vector) or
loaded from a control-vector file, the next token before and after it (engine.steering_preview, in contexts of
its own: the session is untouched), and the session steered by it (Session.steer_vector)."""

from PySide6.QtCore import Signal, Slot

import engine

from ..feature import WorkerCommands
from ..token_text import shown

PREVIEW_BARS = 10


class SteerCommands(WorkerCommands):
    name = "steer"
    directionReady = Signal(object)  # (the SteeringVector or None, what to say)
    previewReady = Signal(object)  # (tokens, before, after): the next token's likeliest after steering
    steered = Signal(str, bool)  # what the session's steering is now, in words; whether some is in force

    def __init__(self, host):
        super().__init__(host)
        self.vector = None  # the direction made or loaded last

    def session_changed(self, session) -> None:
        self.steered.emit(_steering_text(session), _steered(session))

    @Slot(object, object)
    def make_direction(self, positive, negative) -> None:
        self._set(lambda: engine.steering_vector(self.host.model, positive, negative),
                  f"Direction made from {len(positive)} + {len(negative)} texts: towards the first list, away from "
                  "the second.")  # fmt: skip

    @Slot(str)
    def load(self, path: str) -> None:
        self._set(lambda: engine.load_steering_vector(self.host.model, path), f"Direction loaded from {path}.")

    def _set(self, make, said: str) -> None:
        try:
            self.vector = make()
        except (ValueError, OSError) as error:
            self.host.failed.emit(f"could not make the direction: {error}")
            return
        self.directionReady.emit((self.vector, said))

    @Slot(str)
    def save(self, path: str) -> None:
        try:
            engine.save_steering_vector(self.vector, path)
        except (ValueError, OSError) as error:
            self.host.failed.emit(f"could not save the direction: {error}")
            return
        self.host.notice.emit(f"Direction saved to {path} (llama.cpp control-vector format)")

    @Slot(object, float)
    def preview(self, layers, strength: float) -> None:
        """The next token after the text so far, without and with the direction at this strength."""
        host, session = self.host, self.host.session
        if self.vector is None or session is None or host.generating:
            return
        try:
            before, after = engine.steering_preview(host.model, session.ids, self.vector, layers, strength)
        except ValueError as error:
            host.failed.emit(f"could not show the steering: {error}")
            return
        top = after.argsort()[::-1][:PREVIEW_BARS].tolist()
        tokens = [shown(host.model.tokenizer.decode([i])) for i in top]
        self.previewReady.emit((tokens, [float(before[i]) for i in top], [float(after[i]) for i in top]))

    @Slot(object, float)
    def steer(self, layers, strength: float) -> None:
        if self.vector is None:
            return
        if self.host.command(lambda session: session.steer_vector(self.vector, layers, strength), emit=True):
            self.steered.emit(_steering_text(self.host.session), _steered(self.host.session))


def _steered(session) -> bool:
    return session is not None and session.vector_steering is not None


def _steering_text(session) -> str:
    steering = session.vector_steering if session is not None else None
    if steering is None:
        return "Not steering: the model reads the text as trained."
    _, layers, strength = steering
    return (f"Steering with strength {strength:+.1f} after layers {layers[0] + 1} to {layers[-1] + 1}, from the next "
            "step on (logged: a trace replays it).")  # fmt: skip
