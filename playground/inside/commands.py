"""The Inside tab's commands in the worker: the logit lens and attention at one position of the text, and heads
scaled (0: ablated) from the next step on."""

from PySide6.QtCore import Signal, Slot

import engine

from ..feature import WorkerCommands
from .shown import NO_SESSION, InsideShown


class InsideCommands(WorkerCommands):
    name = "inside"
    insideReady = Signal(object)  # an InsideShown: the Inside tab's numbers for one position of the text
    headsSteered = Signal(object)  # the session's head scales now: ((layer, head, factor), ...)

    def session_changed(self, session) -> None:
        """A new session reads through the model as trained (a replayed one as its log steered it); none: no head
        steered."""
        self.headsSteered.emit(session.head_scales if session is not None else ())

    @Slot(object)
    def look_inside(self, request: dict) -> None:
        """request: {"index": a step (-1: the next token), "key": the GUI's}: the logit lens and attention at
        that position (engine.inside_view: one full forward over the text before it; the session is
        untouched), with the token texts the Inside tab shows."""
        host, session = self.host, self.host.session
        if session is None:  # the view shows a trace or a scored text: nothing was read here
            self.insideReady.emit(InsideShown.nothing(request["key"], NO_SESSION))
            return
        index = request["index"]
        if host.generating or index >= len(session.steps):
            return  # the text changes: the GUI asks again for what it shows
        ids = session.ids[: len(session.prompt_ids) + index] if index >= 0 else session.ids
        chosen = session.steps[index] if index >= 0 else None
        heads, additions = session.steering_at(index if index >= 0 else len(session.steps))  # as it was drawn
        try:
            view = engine.inside_view(host.model, ids, head_scales=heads, residual_add=additions)
        except ValueError as error:
            host.failed.emit(f"could not look inside the model: {error}")
            return
        text_of = host.model.tokenizer.decode
        where = f"Step {index + 1}, {chosen.token!r}" if chosen is not None else "The next token"
        self.insideReady.emit(InsideShown(
            key=request["key"], view=view, title=f"{where}: what each layer would predict, and where each head looks"
            + read_under(heads, additions, chosen is not None),
            position_tokens=[text_of([i]) for i in ids],
            grid_tokens=[[text_of([int(i)]) for i in row] for row in view.grid_top],
            chosen_id=None if chosen is None else chosen.token_id, chosen_text=None if chosen is None else chosen.token,
            layers=engine.layer_candidates(view, lambda i: text_of([i])),
        ))  # fmt: skip

    @Slot(object)
    def steer_heads(self, scales) -> None:
        """Scale (0: ablate) attention heads from the next step on (Session.steer_heads); the chart's next token
        follows."""
        if self.host.command(lambda session: session.steer_heads(scales), emit=True):
            self.headsSteered.emit(self.host.session.head_scales)


def read_under(heads, additions, drawn: bool) -> str:
    """What the title adds where the numbers are read through a steered model: for a step, the steering in force
    when it was drawn (its chart's numbers, whatever is in force now); for the next token, the steering now."""
    steering = [words for table, words in ((additions, "the steering vector"), (heads, "the scaled heads"))
                if table is not None]  # fmt: skip
    if not steering:
        return ""
    when = "in force when it was drawn (as the chart shows it)" if drawn else "in force now"
    return f" (read through {' and '.join(steering)} {when})"
