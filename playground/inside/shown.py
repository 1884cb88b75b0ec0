"""What the worker sends the Inside tab for one position of the text (Qt-free)."""

from dataclasses import dataclass

NO_SESSION = ("This text is not a session of the model (a trace being viewed, or a scored text): Replay the trace, "
              "or Step or Generate, to look inside")  # fmt: skip


@dataclass(frozen=True)
class InsideShown:
    """What the worker sends for one position (engine.InsideView and the texts the panel draws)."""

    key: tuple
    view: object  # engine.InsideView
    title: str
    position_tokens: list[str]  # the text of each position's token
    grid_tokens: list[list[str]]  # the text of each grid cell's top token
    chosen_id: int | None  # the token the step took there (None: the next token)
    chosen_text: str | None
    layers: tuple  # engine.Candidates per lens row: each layer's own top tokens, for the chart

    @classmethod
    def nothing(cls, key: tuple, why: str) -> "InsideShown":
        """No numbers for this position (view None): the title says why."""
        return cls(key, None, why, [], [], None, None, ())
