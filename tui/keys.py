"""Every key of the dashboard in one table: the bindings, the footer and the help screen are all built from it."""

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
    label: str  # short, for the footer
    help: str  # a sentence, for the help screen
    footer: bool = True
    changes_things: bool = False  # hidden and refused when the feed is read-only
    display: str | None = None


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
    Key("slash", "filter", "filter", "Filter the log by text or regex (enter keeps it, escape restores)", display="/"),
    Key("e", "cycle_kind", "kind", "Show only log lines of the next event kind (most severe first), then all"),
    Key("f", "cycle_file", "file", "Show only the next log file, then all files", footer=False),
    Key("p", "toggle_pause", "pause", "Pause the log (new lines wait) or follow it again"),
    Key("a", "toggle_zero", "all kinds", "Show or hide event kinds that were never seen", footer=False),
    Key(
        "m",
        "toggle_maximize",
        "maximize",
        "Fill the screen with the focused panel, or restore the layout",
        footer=False,
    ),
    *(Key(str(n), f"focus_panel({n})", f"panel {n}", f"Focus panel {n}", footer=False) for n in range(1, 7)),
    Key("tab", "app.focus_next", "next", "Move focus to the next panel", footer=False),
    Key("shift+tab", "app.focus_previous", "previous", "Move focus to the previous panel", footer=False),
    Key("question_mark", "help", "help", "Show this help", display="?"),
    Key("q", "app.quit", "quit", "Quit rlwatch (nothing running is touched)"),
)


def bindings() -> list[BindingType]:
    """Bindings for the main screen (tab and shift+tab are the app's own)."""
    return [
        Binding(k.key, k.action, k.label, show=k.footer, key_display=k.display)
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
        rows.append((k.display or k.key, k.help))
    return rows
