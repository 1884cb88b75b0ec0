"""Token Playground's engine: numpy models, sampling and the generation loop. Imports no Qt."""

from .checkpoint import load_story_model, resources_dir
from .model import Config, StoryModel

__version__ = "0.1.0"


def load_model(path=None):
    """The shipped story model (path=None) or a story-model checkpoint directory / .npz file."""
    return load_story_model(path)


__all__ = ["Config", "StoryModel", "load_model", "resources_dir", "__version__"]
