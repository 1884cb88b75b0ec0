"""Token Playground's engine: numpy models, sampling and the generation loop. Imports no Qt."""

from .checkpoint import resources_dir
from .loading import load_model, smollm2_path
from .model import Config, StoryModel
from .rules import CommandTool, Rule
from .sampling import Settings, next_token_probs
from .session import GenerationResult, Session, generate
from .steps import Candidates, Step
from .trace import ReplayReport, load_trace, replay, replay_session, save_trace

__version__ = "0.1.0"


__all__ = [
    "Candidates", "CommandTool", "Config", "GenerationResult", "ReplayReport", "Rule", "Session", "Settings",
    "Step", "StoryModel", "generate", "load_model", "load_trace", "next_token_probs", "replay",
    "replay_session", "resources_dir", "save_trace", "smollm2_path", "__version__",
]  # fmt: skip
