"""The seeds' command in the worker: many seeds continue the text from where it is (the session is unchanged)."""

import time

from PySide6.QtCore import Signal, Slot

from ..feature import WorkerCommands


class SeedCommands(WorkerCommands):
    name = "seeds"
    seedsRun = Signal(object, float)  # (engine.SeedRun from where the session is, seconds it took)

    @Slot(object)
    def run_seeds(self, request: dict) -> None:
        """request: {"count": N, "settings": the controls' settings, "at": steps kept (optional)}: seeds 0..N-1
        continue the text from where the session is, or from its first `at` steps (Session.run_seeds: the
        session does not change), each for up to Max new tokens."""
        host = self.host
        if host.session is None or host.generating:
            host.notice.emit("Generate or step first: the seeds continue the text from where it is")
            return
        settings = dict(request["settings"])
        limit = settings.pop("max_new_tokens")  # Max new: tokens per seed from here, as per Generate
        start = time.perf_counter()
        try:
            run = host.session.run_seeds(
                range(request["count"]), max_new_tokens=limit, at=request.get("at"), **settings
            )
        except ValueError as error:
            host.failed.emit(f"could not run the seeds: {error}")
            return
        self.seedsRun.emit(run, time.perf_counter() - start)
