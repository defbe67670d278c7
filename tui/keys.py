"""Every key of the dashboard in one table: the bindings, the key bar and the help screen are all built from it.

The grammar: the four action keys (``w`` ``z`` ``r`` ``s``) work from anywhere and always ask first; a finding an
action fixes names its key. Keys that move through the log are the pager's (less and lnav): ``/`` ``?`` search,
``n`` ``N`` the next and previous match, ``&`` filter, ``e`` ``E`` the next and previous error, ``F`` or ``End``
follow, ``g`` ``G`` top and bottom. ``?`` is help everywhere except in the log, where it searches backwards as in
less (``F1`` is help there, and everywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType

ACTION_KEYS: dict[str, str] = {
    "w": "restart-workers",
    "z": "kill-zombies",
    "r": "resume",
    "s": "restart-server",
}

ACTION_LABELS: dict[str, str] = {
    "restart-workers": "restart workers",
    "kill-zombies": "kill zombies",
    "resume": "resume",
    "restart-server": "restart server",
}

ACTION_TITLES: dict[str, str] = {
    "restart-workers": "Restart workers",
    "kill-zombies": "Kill GPU zombies",
    "resume": "Resume training",
    "restart-server": "Restart inference server",
}


@dataclass(frozen=True, slots=True)
class Key:
    key: str
    action: str
    label: str  # short, for the key bar
    help: str  # a sentence, for the help screen
    footer: bool = True
    changes_things: bool = False  # hidden and refused when the feed is read-only
    display: str | None = None
    priority: bool = False


KEYS: tuple[Key, ...] = (
    *(
        Key(
            k,
            f"request('{a}')",
            ACTION_LABELS[a],
            f"{ACTION_TITLES[a]} (lists every target and step, and asks first)",
            changes_things=True,
        )
        for k, a in ACTION_KEYS.items()
    ),
    Key("d", "findings", "findings", "List every finding in full, with the key or command that fixes it"),
    Key("t", "stacks", "stacks", "Read where each process of the run stands (its Python stack; pauses nothing)"),
    Key("slash", "search", "search", "Search the log forwards (n, N: next and previous match)", display="/"),
    Key(
        "ampersand",
        "filter",
        "filter",
        "Show only the log lines that match a text or regex (as less's &; empty shows all)",
        display="&",
        footer=False,
    ),
    Key("e", "next_error", "next error", "Jump to the next error or failure line in the log (E: previous)"),
    Key("E", "previous_error", "prev error", "Jump to the previous error or failure line in the log", footer=False),
    Key("k", "cycle_kind", "kind", "Show only log lines of the next event kind (most severe first), then all"),
    Key("f", "cycle_file", "file", "Show only the next log file, then all files", footer=False),
    Key("a", "toggle_zero", "all kinds", "Show or hide event kinds that were never seen", footer=False),
    Key(
        "m",
        "toggle_maximize",
        "maximize",
        "Fill the screen with the focused panel (the header and a one-line alert stay), or restore the layout",
        footer=False,
    ),
    *(Key(str(n), f"focus_panel({n})", f"panel {n}", f"Focus panel {n}", footer=False) for n in range(1, 7)),
    Key("tab", "app.focus_next", "next", "Move focus to the next panel", footer=False),
    Key("shift+tab", "app.focus_previous", "previous", "Move focus to the previous panel", footer=False),
    Key("question_mark", "help", "help", "Show this help (F1 too, and in the log, where ? searches)", display="?"),
    Key("f1", "help", "help", "Show this help", display="F1", footer=False),
    Key("q", "quit", "quit", "Quit rlwatch (nothing running is touched)"),
    Key("ctrl+c", "quit", "quit", "Quit rlwatch, as q does (while an action runs, asks first)", footer=False),
)

# The keys of one panel, for the help screen: (keys as shown, what they do). The log's are its bindings too.
LOG_HELP: tuple[tuple[str, str], ...] = (
    ("↑ ↓ PgUp PgDn", "Scroll; scrolling up leaves follow mode (new lines keep arriving below)"),
    ("End F G", "Go to the newest line and follow again (as less +F)"),
    ("Home g", "Go to the oldest line kept"),
    ("← →", "Pan long lines left and right when they are cut"),
    ("-", "Wrap long lines, or cut them at the edge (as less -S); a maximised log wraps by itself"),
    ("/ ?", "Search forwards / backwards (text or regex; smart case); matches are highlighted"),
    ("n N", "Next / previous match, in the direction of the search"),
    ("&", "Filter: show only matching lines (empty restores all); apart from the search"),
    ("e E", "Next / previous error or failure line"),
    ("p", "Stop following here, or follow again"),
    ("Esc", "Clear the search highlight, or close the search or filter prompt"),
)

EVENTS_HELP: tuple[tuple[str, str], ...] = (
    ("↑ ↓", "Highlight an event kind: its count per file and last lines show below"),
    ("Enter / click", "Show only that kind's lines in the log"),
)

DIALOG_HELP: tuple[tuple[str, str], ...] = (
    ("↑ ↓ PgUp PgDn", "Scroll the plan (every target and step)"),
    ("Tab ← →", "Move between Cancel and Confirm (Cancel has the focus first)"),
    ("Enter", "Press the focused button"),
    ("Esc", "Cancel: nothing is done"),
)


def bindings() -> list[BindingType]:
    """Bindings for the main screen (tab and shift+tab are the app's own)."""
    return [
        Binding(k.key, k.action, k.label, show=k.footer, key_display=k.display, priority=k.priority)
        for k in KEYS
        if not k.action.startswith("app.focus")
    ]


PANELS = "1 GPU, 2 memory, 3 events, 4 training, 5 processes, 6 log"


def help_rows(readonly: bool) -> list[tuple[str, str]]:
    """(key, what it does) for the help screen; action keys disappear when nothing may be changed."""
    rows: list[tuple[str, str]] = []
    for k in KEYS:
        if readonly and k.changes_things:
            continue
        if k.action.startswith("focus_panel("):
            if k.key == "1":
                rows.append(("1 … 6", f"Focus a panel: {PANELS}"))
            continue
        if k.key in ("f1", "E"):
            continue  # said with ? and e
        rows.append((k.display or k.key, k.help))
    return rows


def help_sections(readonly: bool) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every key of every panel, by where it works."""
    return [
        ("Everywhere", help_rows(readonly)),
        ("Log (panel 6)", list(LOG_HELP)),
        ("Events (panel 3)", list(EVENTS_HELP)),
        ("Confirm dialog", list(DIALOG_HELP)),
    ]
