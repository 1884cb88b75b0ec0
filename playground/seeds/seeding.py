"""The window's side of the Seeds tab: seeds 0..N-1 continue the text from where it is (from the selected token:
what Continue from here keeps), with the controls' settings; the worker runs them and the session does not change.
A seed chosen goes into the controls; a run whose text has moved on since is cleared, and the status bar says so."""

from PySide6.QtCore import QObject, Signal

import engine

from .panel import start_text

STALE_SEEDS = "The text changed since those seeds ran: run them again from where it is now"


class Seeding(QObject):
    runRequested = Signal(object)  # to the worker: {"count": N, "settings": the controls' settings, "at": ...}
    shown = Signal(object)  # for outside observers: the engine.SeedRun the Seeds tab shows

    name = "seeding"

    def __init__(self, host):
        """host: the controller (its window, worker, settings_here, status)."""
        super().__init__(host)
        self.host, self.panel, self.view = host, host.window.seeds_panel, host.window.token_view
        self.runRequested.connect(host.worker.seeds.run_seeds)
        host.worker.seeds.seedsRun.connect(self._on_run)
        host.worker.busyChanged.connect(self.panel.set_running)
        self.panel.runRequested.connect(self.run_seeds)
        self.panel.seedChosen.connect(self.seed_chosen)

    def run_seeds(self, count: int) -> None:
        """Seeds 0..count-1 from where the text is; a new prompt starts its session first."""
        settings, started = self.host.settings_here()
        if settings is None:
            return
        view, selected = self.view, self.view.selected
        request, where = {"count": count, "settings": settings}, "from here"
        if not started and 0 <= selected < view.step_count() - 1:  # a token of this session's text, not its last
            request["at"], where = selected + 1, start_text(selected + 1, view.step(selected).token)
        self.host.status(f"Running {count} seeds {where}...")
        self.runRequested.emit(request)

    def _on_run(self, run, seconds: float) -> None:
        measure = None
        if (
            self.host.model.name == "story model"
        ):  # the seed lab's measure: kept the first sentence's colour and object?
            measure = engine.story_measure(run, run.text.split(".")[0] + ".")
        view = self.view
        start = start_text(run.at, view.step(run.at - 1).token) if 0 < run.at < view.step_count() else ""
        self.panel.show_run(run, seconds, measure, start)
        self.host.status(self.panel.summary.text())
        self.shown.emit(run)

    def seed_chosen(self, seed: int) -> None:
        self.host.window.controls.seed.setValue(seed)
        start = self.panel.start
        how = (
            f"{start}: Continue from here (that token selected) writes it" if start else "from here: Generate writes it"
        )
        self.host.status(f"Seed {seed} writes that continuation {how}")

    def text_moved(self) -> None:
        """The text changed: the Seeds tab's run no longer continues it (the tab and the status bar say so)."""
        if self.panel.clear(STALE_SEEDS):
            self.host.status(f"Seeds cleared. {STALE_SEEDS}")
