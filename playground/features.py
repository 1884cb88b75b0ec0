"""The features the window is built of. Each is a folder (its panel, its GUI side, its worker-side commands); a new
feature is its folder and a line here."""

from .compare.commands import CompareCommands
from .inside.commands import InsideCommands
from .models.commands import ModelCommands
from .rules.commands import RuleCommands
from .seeds.commands import SeedCommands
from .strip.commands import ScoringCommands
from .tree.commands import TreeCommands

# made by the worker, in this order (each run's changes reach the tree before the prompt is scored; on closing, the
# second model is closed before the worker's own)
WORKER_COMMANDS = (TreeCommands, InsideCommands, SeedCommands, RuleCommands, ScoringCommands, CompareCommands,
                   ModelCommands)  # fmt: skip
