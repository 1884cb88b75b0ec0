"""The features the window is built of. Each is a folder (its panel, its GUI side, its worker-side commands); a new
feature is its folder, a line in each list here, and its panel's place in the window (main_window, docks)."""

from .chat.chatting import Chatting
from .chat.commands import ChatCommands
from .compare.commands import CompareCommands
from .compare.comparing import Comparing
from .documents.commands import DocumentCommands
from .documents.documents import Documents
from .documents.recovery import Recovery
from .inside.commands import InsideCommands
from .inside.looking import LookingInside
from .models.commands import ModelCommands
from .models.loading import Loading
from .rules.commands import RuleCommands
from .rules.ruling import Ruling
from .seeds.commands import SeedCommands
from .seeds.seeding import Seeding
from .steer.commands import SteerCommands
from .steer.steering import Steering
from .strip.commands import ScoringCommands
from .strip.scoring import Scoring
from .traces import Traces
from .tree.branches import Branches
from .tree.commands import TreeCommands
from .watch.watching import Watching

# made by the worker, in this order (each run's changes reach the tree before the prompt is scored; on closing, the
# second model is closed before the worker's own)
WORKER_COMMANDS = (TreeCommands, InsideCommands, SteerCommands, SeedCommands, RuleCommands, ScoringCommands,
                   CompareCommands, ModelCommands, DocumentCommands, ChatCommands)  # fmt: skip

# made by the controller, in this order, each given the controller as its host (controller.<its name>): traces and
# models first (the others ask whether a trace is viewed or a model loads); documents, then recovery, last (they
# open a session through the others; recovery autosaves what documents make)
WINDOW_SIDES = (Traces, Loading, Chatting, Ruling, Seeding, Scoring, Comparing, Branches, LookingInside, Steering, Watching,
                Documents, Recovery)  # fmt: skip
