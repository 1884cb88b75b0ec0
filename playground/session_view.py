"""What the GUI knows of the worker's session. Only the worker touches the session; after each change it
publishes a SessionView, an immutable copy of what the GUI needs, and the GUI reads only that. The GUI
also counts the starts and resets it has sent, so that between sending one and hearing it was done it
already goes by the session that command leaves."""

from dataclasses import dataclass


@dataclass(frozen=True)
class SessionView:
    """The worker's session as it was when published (during a run, after each turn of steps: the steps
    themselves come one by one with the worker's `stepped`)."""

    handled: int = 0  # the session commands (start, reset) the worker has handled so far
    prompt: str | None = None  # the session's prompt; None: there is no session
    steps: int = 0  # how many steps the session has
    stopped: str | None = None  # why the session stopped, or None
    generating: bool = False  # a run (Generate) is going on
    healing: str | None = None  # token healing: the text the next steps must spell first (cut from the end)
    events: int = 0  # how many events the session has noted (a rule that could not act, a slow rule disabled)
    last_event: str | None = None  # the latest of them: the status bar shows each new one
    number: int = 0  # which session this is: the worker counts every session it has had (started, replayed, none)
    changes: int = 0  # its actions and tree edits so far: (number, changes) moves with every change of the session

    @property
    def revision(self) -> tuple[int, int]:
        """What a saved session file is compared with: another session, or this one changed since (documents/)."""
        return self.number, self.changes


class KnownSession:
    """The GUI's side: the latest SessionView, and the session commands sent since."""

    def __init__(self):
        self.view = SessionView()
        self._sent = 0  # session commands (start, reset) sent: the worker's SessionView counts those it handled
        self._sent_prompt: str | None = None  # the prompt of the session those leave (None: none)
        self._reset_at = 0  # the number of the reset sent last

    def publish(self, view: SessionView) -> None:
        self.view = view

    def start_sent(self, prompt: str) -> None:
        self._sent += 1
        self._sent_prompt = prompt

    def reset_sent(self) -> None:
        self._sent += 1
        self._sent_prompt, self._reset_at = None, self._sent

    @property
    def prompt(self) -> str | None:
        """The prompt of the worker's session (None: it has none), once it has done the starts and resets
        sent to it (a start that fails leaves the session there was: its SessionView then says so)."""
        return self.view.prompt if self.view.handled == self._sent else self._sent_prompt

    @property
    def exists(self) -> bool:
        return self.prompt is not None

    @property
    def discarding(self) -> bool:
        """After a reset is sent, until the worker has done it: what comes from the old session is dropped."""
        return self.view.handled < self._reset_at
