import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the window tests run headless

import pytest

import engine


@pytest.fixture(scope="session")
def story_model():
    """The real shipped story model, loaded once."""
    return engine.load_model()
