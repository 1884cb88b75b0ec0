"""python -m playground.screenshot: the window after a real generation, a view taken through its docks, saved
as a PNG of the size asked."""

import os

import pytest
from PySide6.QtGui import QImage

from playground.documents.autosave import DATA_ENV
from playground.screenshot import main, render


@pytest.mark.parametrize("view", ["tree", "inside"])
def test_a_view_of_the_story_model_is_saved_at_the_size_asked(qapp, tmp_path, view):
    out = tmp_path / "docs" / f"screenshot-{view}.png"
    assert main([str(out), "story", "1024x700", "--view", view]) == out
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1024, 700)


def test_an_unknown_view_is_refused_and_nothing_is_written(qapp, tmp_path):
    with pytest.raises(ValueError, match="view 'side tabs' is not one of default, tree, inside, compare"):
        render(tmp_path / "shot.png", view="side tabs")
    assert list(tmp_path.iterdir()) == []


def test_the_picture_leaves_the_persons_own_data_dir_alone(qapp, tmp_path, data_dir):
    """The window in the picture autosaves and marks itself running in a folder of its own: the person's data dir
    (here the test's) gets nothing, so their own session is neither offered in the picture nor marked taken."""
    out = tmp_path / "shot.png"
    assert main([str(out), "story", "800x600"]) == out
    assert list(data_dir.iterdir()) == []
    assert os.environ[DATA_ENV] == str(data_dir)  # put back as it was
