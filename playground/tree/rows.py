"""How the Tree tab's rows look: a row's text (its run of tokens, cut in the middle past ROW_CHARS), its tooltip,
bold on the active branch, italic and grey where nobody has walked yet. A mixin of TreePanel (it uses the panel's
views, rows and path)."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTreeWidgetItem

from ..token_text import shown
from .numbers import probability_text, short

MARKS = {"forced": "forced", "rule": "rule", "tool": "tool"}  # the steps the model did not choose
PIN = "⚑"  # a pinned branch (a flag every common font has; an emoji may have no glyph)
LAST = Qt.ItemDataRole.UserRole  # a row's last node (the node a click goes to)
UNVISITED = QColor(128, 128, 128)
TIP_ROWS = 40  # tokens listed in a row's tooltip
ROW_CHARS = 800  # of a longer row's text, its start and its end are shown
MEASURE = ("p: the model's own probability of each row's first token (temperature 1, before any sampler), whoever "
           "chose it · ⟶ p: of the whole branch")  # fmt: skip
SEQUENCE_TIP = ("⟶ p: the model's own probability of the whole branch from the prompt (the product of its steps' p, "
                "drawn, forced or expanded alike)")  # fmt: skip


def _token_tip(view) -> str:
    """A token's tooltip line, the model's own p then the chain's: 'park'  p 0.7340, drawn at 1.0000 ..."""
    drawn = "" if view.drawn is None else f", drawn at {short(view.drawn, 4)} after the samplers"
    unvisited = "  (expanded, not visited)" if view.expanded else ""
    return f"{view.token!r}  p {short(view.probability, 4)}{drawn}  {view.source}{unvisited}"


class RowLook:
    def _new_row(self, head: int, run: list[int]) -> QTreeWidgetItem:
        item = QTreeWidgetItem()
        self.runs[head] = run
        for n in run:
            self.head[n] = head
        self.items[head] = item
        if head == 0:
            item.setText(0, "(prompt)")
            item.setData(0, LAST, 0)
        else:
            self._body[head] = "".join(shown(self.views[n].token) for n in run)
            self._refresh(head, item)
        return item

    def _refresh(self, head: int, item: QTreeWidgetItem | None = None) -> None:
        """A row's text and last node from its run."""
        if head == 0:
            return
        item = self.items[head] if item is None else item
        item.setText(0, self._row_text(head))
        item.setData(0, LAST, self.runs[head][-1])

    def _row_text(self, head: int) -> str:
        """⚑ (a pin in it), «names», the first step's probability (the model's own, as every row's: MEASURE) and
        mark ("0.03, forced"), the tokens; a leaf row ends with its sequence's probability."""
        views, last = self.views, self.runs[head][-1]
        first = views[head]
        p = short(first.probability)
        mark = f", {MARKS[first.source]}" if first.source in MARKS else ""  # an expansion's: italic grey instead
        body = self._body[head]
        if len(body) > ROW_CHARS:  # drawing elides it anyway; eliding a long text costs ms per paint
            body = f"{body[: ROW_CHARS // 4]} … {body[-ROW_CHARS * 3 // 4 :]}"
        text = f"{p}{mark}  {body}"
        if self._named:
            text = "".join(f"«{views[n].name}» " for n in self._marked(head, self._named)) + text
        if self._pinned and self._marked(head, self._pinned):
            text = PIN + " " + text
        if not self.children[last]:
            text += f"  ⟶ p {probability_text(self._logp[last])}"
        return text

    def row_tip(self, item: QTreeWidgetItem) -> str:
        """A row's tooltip, made when it is asked for (not per row and update): its tokens with their numbers."""
        head = self._head_of(item)
        if head == 0:
            return "the prompt: every branch starts here"
        run, views = self.runs[head], self.views
        lines = [_token_tip(views[n]) for n in run[:TIP_ROWS]]
        if len(run) > TIP_ROWS:
            lines.append(f"... {len(run) - TIP_ROWS} more tokens")
        if not self.children[run[-1]]:
            lines.append(SEQUENCE_TIP)
        return "\n".join(lines)

    def _marked(self, head: int, marked: set[int]) -> list[int]:
        """The nodes of a row among these (the named or pinned nodes: few in a tree), in order."""
        return sorted(n for n in marked if self.head.get(n) == head) if marked else []

    def _style(self, item: QTreeWidgetItem) -> None:
        """Bold on the active branch; italic and grey where an expansion added it and nobody walked into it."""
        head = self._head_of(item)
        unvisited = self.views[head].expanded
        item.setFont(0, self._fonts[head in self._bold, unvisited])
        item.setForeground(0, self._grey if unvisited else self._plain)

    def is_unvisited(self, item: QTreeWidgetItem) -> bool:
        """Whether a row starts with a node an expansion added that nobody walked into (drawn italic, grey)."""
        return self.views[self._head_of(item)].expanded

    def _restyle_path(self) -> None:
        """Bold the rows of the active branch, and only the rows whose state changed; a row turning bold opens."""
        bold = {self.head[n] for n in self.path}
        turned = bold ^ self._bold
        self._bold = bold
        for head in turned:
            item = self.items.get(head)
            if item is None:
                continue
            self._style(item)
            if head in bold:
                item.setExpanded(True)
                if item.parent() is not None:
                    item.parent().setExpanded(True)
