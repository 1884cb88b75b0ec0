"""The window's views as docks (QDockWidget): the text stays in the centre and every other view can be moved,
stacked as tabs, floated or given the whole width. The View menu lists them all; the layout a person made is
saved with the window (QMainWindow.saveState) and View > Reset layout puts the default back."""

from PySide6.QtCore import QByteArray, QSize, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

from .widgets.scroll_column import ScrollColumn

RIGHT = Qt.DockWidgetArea.RightDockWidgetArea
BOTTOM = Qt.DockWidgetArea.BottomDockWidgetArea
MAX_SIDE = 16384  # px: a remembered window size past this is not a window's
STATE_VERSION = 3  # saveState's version: a state saved by another layout of docks is not restored

# objectName, title, the window's attribute for the panel, tooltip, scrolls (a tall panel scrolls in a short dock)
DOCKS = (
    ("chartDock", "Chart", "chart", "The distribution of the selected token (or the next one)", False),
    ("chatDock", "Chat", "chat_panel", "The conversation your message joins in chat mode: its system prompt and "
     "turns", False),
    ("rulesDock", "Rules", "rules_panel", "Rules that act when the text matches", True),
    ("samplersDock", "Samplers", "sampler_scroll",
     "Penalties, DRY, XTC, typical-p, top-n-σ, logit bias, and the order of the stages", False),
    ("seedsDock", "Seeds", "seeds_panel", "Many seeds from where the text is: what they write, how often", True),
    ("treeDock", "Tree", "tree_panel", "Every branch of the text: click a row to make its branch the text", True),
    ("insideDock", "Inside", "inside_panel", "Inside the model at the selected token: what each layer would "
     "predict (logit lens) and where each head looks (attention)", False),
    ("steerDock", "Steer", "steer_panel", "Steer the model with a direction in its residual stream, made from two "
     "lists of texts", False),
    ("compareDock", "Compare", "comparison_panel", "Two models, token by token", False),
    ("stripDock", "Uncertainty", "uncertainty_strip", "How unsure the model was at each step", False),
)  # fmt: skip
TABBED = (
    "rulesDock",
    "chatDock",
    "samplersDock",
    "seedsDock",
    "treeDock",
    "insideDock",
    "steerDock",
)  # stacked as tabs, under the text
RAISED = "rulesDock"  # the tab in front by default
HIDDEN = ("compareDock",)  # shown when a comparison is made


class Docks:
    """The window's docks by objectName, and what a person does with them (show, hide, reset, save)."""

    def __init__(self, window: QMainWindow):
        self.window = window
        self.by_name: dict[str, QDockWidget] = {}
        self.by_panel: dict[int, QDockWidget] = {}
        window.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks
                              | QMainWindow.DockOption.AllowNestedDocks)  # fmt: skip
        window.setCorner(Qt.Corner.BottomRightCorner, RIGHT)  # the chart takes the whole height at the right
        for name, title, attribute, tip, scrolls in DOCKS:
            panel = getattr(window, attribute)
            dock = QDockWidget(title, window, objectName=name)
            dock.setToolTip(tip)
            dock.setWidget(ScrollColumn(panel, f"{name}Scroll") if scrolls else panel)
            dock.toggleViewAction().setObjectName(f"{name}Action")
            self.by_name[name] = dock
            self.by_panel[id(panel)] = dock
        self.reset()

    def dock(self, panel: QWidget) -> QDockWidget:
        return self.by_panel[id(panel)]

    def reset(self) -> None:
        """The default layout: the chart right of the text, its whole height; under the text, the strip (or the
        comparison) beside the panels stacked as tabs."""
        window, docks = self.window, self.by_name
        for dock in docks.values():
            dock.setFloating(False)
            window.removeDockWidget(dock)
        window.addDockWidget(RIGHT, docks["chartDock"])
        window.addDockWidget(BOTTOM, docks["stripDock"])
        first = docks[TABBED[0]]
        window.splitDockWidget(docks["stripDock"], first, Qt.Orientation.Horizontal)  # (split before tabs: Qt)
        for name in TABBED[1:]:
            window.tabifyDockWidget(first, docks[name])
        window.tabifyDockWidget(docks["stripDock"], docks["compareDock"])
        for name, dock in self.by_name.items():
            dock.setVisible(name not in HIDDEN)
        self.by_name["stripDock"].raise_()
        self.by_name[RAISED].raise_()
        width = window.width()
        window.resizeDocks([docks["chartDock"]], [width // 3], Qt.Orientation.Horizontal)
        window.resizeDocks([docks["stripDock"], first], [width // 4, width * 5 // 12], Qt.Orientation.Horizontal)
        window.resizeDocks([first], [window.height() // 3], Qt.Orientation.Vertical)

    def reset_layout(self) -> None:
        """View > Reset layout: the default layout, sized for the window as it is now."""
        self.reset()

    def show(self, panel: QWidget) -> None:
        """Show the dock that holds panel and bring it in front of the docks stacked with it."""
        dock = self.dock(panel)
        dock.show()
        dock.raise_()

    def hide(self, panel: QWidget) -> None:
        self.dock(panel).hide()

    def raised(self, panel: QWidget) -> bool:
        """Whether a person can see the panel: its dock is shown and not behind another tab (before the window
        is shown, whether the dock is shown)."""
        dock = self.dock(panel)
        if dock.isHidden():
            return False
        return not self.window.isVisible() or dock.isFloating() or not dock.visibleRegion().isEmpty()

    def fill_menu(self, view_menu) -> QAction:
        """The View menu's toggles, one per dock in the order of DOCKS, then Reset layout (returned)."""
        view_menu.addSeparator()
        for dock in self.by_name.values():
            view_menu.addAction(dock.toggleViewAction())
        reset = QAction("Reset layout", self.window, objectName="resetLayoutAction")
        reset.triggered.connect(lambda _checked=False: self.reset_layout())
        view_menu.addAction(reset)
        return reset

    def save(self, prefs) -> None:
        prefs.setValue("windowState", self.window.saveState(STATE_VERSION))
        prefs.setValue("windowGeometry", self.window.saveGeometry())
        prefs.setValue("windowSize", self.window.size())  # the inner size: restoreGeometry alone may lose a frame's

    def restore(self, read) -> None:
        """The layout saved at the last close, read defensively (read: a RememberedReader): a value that is not a
        state of these docks is ignored, with a note."""
        geometry, state = read.raw("windowGeometry"), read.raw("windowState")
        if geometry is not None and not (isinstance(geometry, QByteArray) and self.window.restoreGeometry(geometry)):
            read.reset("window geometry", "…", "not a window geometry")
        size = read.raw("windowSize")
        if isinstance(size, QSize) and geometry is not None and not self.window.isMaximized():
            # without a window manager (Xvfb) restoreGeometry takes a title bar's height off each launch
            self.window.resize(size.expandedTo(self.window.minimumSize()).boundedTo(QSize(MAX_SIDE, MAX_SIDE)))
        if state is None:
            return
        if not isinstance(state, QByteArray) or not self.window.restoreState(state, STATE_VERSION):
            read.reset("layout", state if not isinstance(state, QByteArray) else "…", "not a layout of these docks")
            self.reset_layout()
        for name in HIDDEN:  # a comparison is not kept across launches: its dock comes back with the next one
            self.by_name[name].hide()
