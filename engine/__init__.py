"""Token Playground's engine: numpy models, sampling and the generation loop. Imports no Qt."""

from engine.backends.gguf.control_vector import load_steering_vector, save_steering_vector
from engine.backends.llamacpp.threads import DEFAULT_THREADS_RULE, check_threads, default_threads, max_threads
from engine.core import __version__
from engine.core.chat import (
    Conversation,
    Turn,
    chat_prompt,
    default_system,
    has_template,
    prompt_tokens,
    reasoning_markers,
    resume_at,
    split_thinking,
    thinking_markers,
)
from engine.core.checks import UnknownCharacterError
from engine.core.commands import LIMITS, CommandTool
from engine.core.compare import Comparison, compare
from engine.core.contract import Backend, Capabilities, Context
from engine.core.expand import MAX_EXPANSION, ExpandResult
from engine.core.files import atomic_write_bytes, end_writes
from engine.core.inside import InsideView, attention_weights, inside_view, layer_candidates, logit_lens
from engine.core.replay import OtherModelError, other_model_sentence, replay, replay_session, same_model
from engine.core.rules import Rule
from engine.core.rules_file import load_rules, rules_from_json, rules_to_json, save_rules
from engine.core.sampling import GREEDY, STAGE_NAMES, next_token_probs
from engine.core.scoring import ScoreResult, score
from engine.core.seeds import MAX_SEEDS, SeedRun
from engine.core.session import GenerationResult, Session, generate
from engine.core.session_file import load_session_file, save_session_file, session_document
from engine.core.settings import LLAMA_CPP_ORDER, MAX_SEED, MAX_TEMPERATURE, SAMPLERS, Settings
from engine.core.settled import SETTLED_BY, settled_layers
from engine.core.steering import SteeringVector, steering_preview, steering_vector
from engine.core.steps import TOP_CANDIDATES, Candidates, Step
from engine.core.timing import ForwardTiming
from engine.core.trace import load_trace, save_trace, validate_trace
from engine.core.tree import NodeView
from engine.core.verdict import ReplayReport
from engine.discovery import FoundModel, find_models
from engine.loading import load_model, smollm2_path
from engine.serve.cli import main as serve_main
from engine.story.checkpoint import resources_dir
from engine.story.corpus import story_measure
from engine.story.model import Config, StoryModel

__all__ = [
    "DEFAULT_THREADS_RULE", "GREEDY", "LLAMA_CPP_ORDER", "MAX_EXPANSION", "MAX_SEED", "MAX_SEEDS", "MAX_TEMPERATURE", "SAMPLERS", "STAGE_NAMES", "TOP_CANDIDATES", "Backend", "Candidates", "Capabilities", "Comparison",
    "Context", "CommandTool", "LIMITS", "Config", "ExpandResult", "ForwardTiming", "FoundModel", "InsideView", "NodeView", "GenerationResult", "ReplayReport", "Rule", "ScoreResult", "SeedRun", "Session",
    "Settings", "Step", "StoryModel", "UnknownCharacterError", "atomic_write_bytes", "attention_weights", "check_threads", "compare", "default_threads", "end_writes", "generate", "inside_view",
    "layer_candidates", "load_model", "load_trace", "logit_lens", "max_threads",
    "next_token_probs", "find_models", "OtherModelError", "replay", "replay_session", "same_model", "other_model_sentence", "resources_dir", "save_trace", "score",
    "smollm2_path", "story_measure", "validate_trace", "__version__",
    "SteeringVector", "steering_preview", "steering_vector", "save_steering_vector", "load_steering_vector",
    "serve_main", "load_rules", "save_rules", "rules_from_json", "rules_to_json",
    "load_session_file", "save_session_file", "session_document",
    "Conversation", "Turn", "chat_prompt", "default_system", "has_template", "prompt_tokens", "reasoning_markers", "resume_at",
    "split_thinking", "thinking_markers", "SETTLED_BY", "settled_layers",
]  # fmt: skip
