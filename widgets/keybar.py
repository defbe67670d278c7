"""The bottom line of keys: what the focused panel and the screen answer to, cut to the width, never losing help
and quit.

Textual's footer lays every binding out in a row and clips the end: at 80 columns ``? help`` and ``q quit`` fell
off. This bar keeps help and quit at the right, fills the rest from the left with the focused widget's keys first
(the log's ``/ search``, ``F follow``…), then the screen's, and drops whole keys rather than halves. A click on a key
presses it.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widget import Widget
from textual.widgets import Input

PINNED = ("help", "quit")
PREFERRED = ("question_mark", "q")  # of two keys for help or quit, the one shown
KEY_STYLE = "bold reverse"
HIDDEN = frozenset({"ctrl+q"})  # Textual's own quit key: rlwatch's is q (and Ctrl-C), which waits for a running action
PROMPT_WORDS = {"search": "search", "search_back": "search", "filter": "filter"}


def _shown_key(key: str, display: str | None) -> str:
    if display:
        return display
    return {"question_mark": "?", "slash": "/", "ampersand": "&", "minus": "-", "escape": "Esc"}.get(key, key)


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar {
        height: 1;
        background: $panel;
        color: $text-muted;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._spans: list[tuple[int, int, str]] = []  # x from, x to, key to press
        self.remedy: str | None = None  # the key of the remedy the banner names: first, whatever the width

    def set_remedy(self, key: str | None) -> None:
        """The banner's headline names this key (``s restart server``): the bar shows it first, so a narrow bar
        that drops keys from its end never drops the one the banner asks for."""
        if key != self.remedy:
            self.remedy = key
            self.refresh()

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: object) -> None:
        self.refresh()

    def items(self) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
        """(key to press, key as shown, label) for the left part and for the pinned right part."""
        prompt = self._prompt()
        if prompt is not None:
            return prompt
        left: list[tuple[str, str, str]] = []
        right: dict[str, tuple[str, str, str]] = {}
        seen: set[str] = set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if key in HIDDEN:
                continue
            if not active.enabled and binding.action.startswith("request"):
                continue
            if binding.action in PINNED:
                # help by the key that opens it here: '?' searches in the log, F1 is help everywhere
                if binding.action not in right or key in PREFERRED:
                    right[binding.action] = (key, _shown_key(key, binding.key_display), binding.description)
                continue
            if not binding.show or binding.description in seen:
                continue
            seen.add(binding.description)
            left.append((key, _shown_key(key, binding.key_display), binding.description))
        pinned = [right[a] for a in PINNED if a in right]
        first = [item for item in left if item[0] == self.remedy]
        return first + [item for item in left if item[0] != self.remedy], pinned

    def _prompt(self) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]] | None:
        """At a text prompt (the log's search or filter) the letters are typed, so ``q quit`` would be false: the bar
        says how the prompt ends, and F1 for help."""
        focused = self.screen.focused
        if not isinstance(focused, Input):
            return None
        word = PROMPT_WORDS.get(str(getattr(focused.parent, "mode", "")), "done")
        return [("enter", "Enter", word), ("escape", "Esc", "cancel")], [("f1", "F1", "help")]

    def render(self) -> Text:
        width = self.content_size.width
        left, pinned = self.items()
        kstyle = KEY_STYLE

        def piece(shown: str, label: str) -> Text:
            t = Text(no_wrap=True, end="")
            t.append(f" {shown} ", style=kstyle)
            t.append(f" {label} ")
            return t

        tail = Text(no_wrap=True, end="")
        tail_spans: list[tuple[int, int, str]] = []
        for key, shown, label in pinned:
            p = piece(shown, label)
            tail_spans.append((tail.cell_len, tail.cell_len + p.cell_len, key))
            tail.append_text(p)
        out = Text(no_wrap=True, end="")
        spans: list[tuple[int, int, str]] = []
        room = width - tail.cell_len
        for key, shown, label in left:
            p = piece(shown, label)
            if out.cell_len + p.cell_len > room:
                break
            spans.append((out.cell_len, out.cell_len + p.cell_len, key))
            out.append_text(p)
        gap = max(0, width - out.cell_len - tail.cell_len)
        out.append(" " * gap)
        offset = out.cell_len
        spans += [(a + offset, b + offset, k) for a, b, k in tail_spans]
        out.append_text(tail)
        out.truncate(width)
        self._spans = spans
        return out

    def on_click(self, event: events.Click) -> None:
        for a, b, key in self._spans:
            if a <= event.x < b:
                event.stop()
                self.app.simulate_key(key)
                return
