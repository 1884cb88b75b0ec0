"""What the worker says to a person: why a session cannot go on, and an error as a sentence."""


def why_it_cannot_go_on(session) -> str | None:
    """Why Step and Generate cannot carry on this session, and how a person can, or None when they can.
    A max_new_tokens stop is not one: Max new counts per Generate, so they go on past it."""
    reason = session.stopped
    if reason == "context full":
        return (f"The context is full ({session.model.context_length:,} positions): Step and Generate cannot "
                "go on. Click a token to branch from there, or Reset to start over.")  # fmt: skip
    if reason and reason != "max_new_tokens":
        return (f"The model ended the text ({reason}): Step and Generate cannot go on. Insert text to "
                "continue it, click a token to branch from there, or Reset to start over.")  # fmt: skip
    return None


def readable(error: Exception) -> str:
    """An error as a person reads it: a ValueError's or OSError's own message, else its type too."""
    return str(error) if isinstance(error, (ValueError, OSError)) else f"{type(error).__name__}: {error}"
