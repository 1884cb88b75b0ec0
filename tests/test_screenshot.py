"""python -m playground.screenshot: the window after a real generation, a view taken through its docks, saved
as a PNG of the size asked."""

import pytest
from PySide6.QtGui import QImage

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
