"""Reading ``rlwatch.yaml``: one-line, line-numbered errors, and where the configuration of a run comes from.

A person who mistypes a key at 3 a.m. needs ``rlwatch.yaml:12: gpu.bakend: unknown key``, not a pydantic dump or
a traceback. So the file is parsed with PyYAML's node tree (which keeps line numbers), turned into plain Python
values by :class:`_Builder` (which rejects duplicate keys, unknown tags and alias bombs on the way), and validated by
the pydantic models; the first error in file order is mapped back through the node tree to its line.

Semantics worth knowing:

- The file is the whole truth. Keys it leaves out take the model defaults (``configs/reference.yaml``), not the
  defaults of the profile it names: ``profile`` is a label that front ends show and parsers may use. Start from
  ``configs/<profile>.yaml`` or ``rlwatch init`` to get a profile's rules written out.
- An empty file, or a section left empty (``thresholds:`` with every key commented out), means defaults.
- Mapping keys are taken as written (``on:`` is the key "on", not YAML 1.1's boolean true).
- Relative paths are relative to the run directory. :func:`resolve_config` stores that directory, absolute, in
  ``cfg.run_dir``; :func:`absolute` resolves a path (or a glob) of the configuration against it.
"""

from __future__ import annotations

import difflib
import glob
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from rlwatch.common.globbing import iglob
from rlwatch.common.patterns import bounded_problem
from rlwatch.common.textsafe import redact_url
from rlwatch.common.trust import LinkRefused, config_distrust, open_followed
from rlwatch.config.models import Config, ProcessRule, Provenance, names_of
from rlwatch.discover.discovery import discover

if TYPE_CHECKING:
    import yaml
    from yaml.nodes import MappingNode, Node, SequenceNode

MAX_CONFIG_BYTES = 1 << 20  # a configuration is a few KiB; anything this big is the wrong file
MAX_VALUES = 100_000  # values after alias expansion: bounds the work an alias bomb could cause
MAX_MESSAGE = 240

RUN_DIR_FILE = "rlwatch.yaml"
PROFILES = ("auto", "areal", "trl", "verl", "openrlhf", "workers", "generic")

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class ConfigError(Exception):
    """A configuration that cannot be used, as one line: ``FILE:LINE: key.path: problem``.

    ``line`` and ``key`` are None when they do not apply (an unreadable file has neither).
    """

    def __init__(
        self,
        file: str,
        problem: str,
        *,
        line: int | None = None,
        key: str | None = None,
        more: tuple[ConfigError, ...] = (),
    ) -> None:
        self.file = _one_line(file)
        self.problem = _one_line(problem)
        self.line = line
        self.key = None if key is None else _one_line(key)
        self.more = more  # the file's other mistakes, in file order: each is said on a line of its own
        super().__init__(str(self))

    def every(self) -> tuple[ConfigError, ...]:
        """This mistake and the file's others, in file order."""
        return (self, *self.more)

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [where] + ([self.key] if self.key else []) + [self.problem]
        return ": ".join(parts)


def _one_line(text: str) -> str:
    """Printable and short: a message may quote a key or a YAML token, which may hold anything."""
    out = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return out if len(out) <= MAX_MESSAGE else out[: MAX_MESSAGE - 1] + "…"


# ---------------------------------------------------------------------------------------------------------------
# Reading and parsing


def _read_text(path: Path, name: str) -> str:
    try:
        # A link another user planted is not followed; a FIFO would block the open (and rlwatch) for ever: opened
        # without waiting, and read only when it is a regular file.
        fd = open_followed(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(
                    name, f"cannot read: {'Is a directory' if stat.S_ISDIR(mode) else 'not a regular file'}"
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except LinkRefused as exc:
        raise ConfigError(name, f"cannot read: {exc.strerror}") from None
    except OSError as exc:
        raise ConfigError(name, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(name, f"too large to be a configuration (over {MAX_CONFIG_BYTES // 1024} KiB)")
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise ConfigError(name, "a binary file, not a YAML configuration (NUL byte)", line=line)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(name, f"not UTF-8 text (byte 0x{data[exc.start]:02x})", line=line) from None


def _yaml_error(name: str, text: str, exc: yaml.YAMLError) -> ConfigError:
    import yaml

    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        return ConfigError(name, f"could not parse YAML: unacceptable character #x{ord(char):04x}", line=line)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        if exc.context:
            where = exc.context_mark
            if where is not None and mark is not None and where.line != mark.line:
                context = f"{exc.context} (line {where.line + 1})"
            else:
                context = exc.context
            problem = f"{context}, {problem}" if problem.startswith("but ") else f"{context}: {problem}"
        if "'\\t'" in problem:
            problem += " (indent with spaces: YAML does not allow tabs)"
        return ConfigError(name, f"could not parse YAML: {problem}", line=None if mark is None else mark.line + 1)
    return ConfigError(name, f"could not parse YAML: {exc}")


def _compose(name: str, text: str) -> tuple[Node | None, yaml.SafeLoader]:
    # PyYAML is imported here and in the functions below, all reached only from a file being parsed: a run
    # without an rlwatch.yaml does not pay for it at the start (tests/test_import_hygiene.py).
    import yaml

    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(name, text, exc) from None
    try:
        return loader.get_single_node(), loader
    except yaml.YAMLError as exc:
        raise _yaml_error(name, text, exc) from None
    except RecursionError:
        raise ConfigError(name, "could not parse YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _key_text(key: str) -> str:
    return key if _PLAIN_KEY.match(key) else repr(key)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return _key_text(part) if not path else f"{path}.{_key_text(part)}"


class _Builder:
    """Turns a composed node tree into plain dicts, lists and scalars, with the checks PyYAML does not make."""

    def __init__(self, name: str, loader: yaml.SafeLoader) -> None:
        self.name = name
        self.loader = loader
        self.done: dict[int, tuple[object, int]] = {}  # id(node) -> (value, values after expansion)
        self.active: set[int] = set()

    def error(self, node: Node, path: str, problem: str) -> ConfigError:
        return ConfigError(self.name, problem, line=_line(node), key=path or None)

    def build(self, node: Node, path: str = "") -> tuple[object, int]:
        from yaml.nodes import MappingNode, SequenceNode

        key = id(node)
        if key in self.done:
            return self.done[key]
        if key in self.active:
            raise self.error(node, path, "an alias refers to itself")
        self.active.add(key)
        try:
            if isinstance(node, MappingNode):
                result = self._mapping(node, path)
            elif isinstance(node, SequenceNode):
                result = self._sequence(node, path)
            else:
                result = (self._scalar(node, path), 1)
        finally:
            self.active.discard(key)
        if result[1] > MAX_VALUES:
            raise self.error(node, path, f"too many values after expanding aliases (over {MAX_VALUES})")
        self.done[key] = result
        return result

    def _scalar(self, node: Node, path: str) -> object:
        import yaml

        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise self.error(node, path, f"cannot read this value: {problem}") from None
        except Exception as exc:  # PyYAML's constructors fail in many ways on odd input (`!!timestamp x`, month 13)
            detail = str(exc) if isinstance(exc, ValueError | OverflowError) else f"not a valid {node.tag}"
            raise self.error(node, path, f"cannot read this value: {detail}") from None

    def _sequence(self, node: SequenceNode, path: str) -> tuple[object, int]:
        if node.tag != _SEQ_TAG:
            raise self.error(node, path, f"unsupported tag {node.tag}")
        items: list[object] = []
        total = 1
        for index, child in enumerate(node.value):
            value, size = self.build(child, _join(path, index))
            items.append(value)
            total += size
        return items, total

    def _mapping(self, node: MappingNode, path: str) -> tuple[object, int]:
        import yaml
        from yaml.nodes import ScalarNode

        if node.tag != _MAP_TAG:
            raise self.error(node, path, f"unsupported tag {node.tag}")
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, ScalarNode):
                raise self.error(key_node, path, "a key must be a plain name, not a list or a mapping")
            if key_node.value in seen:
                first = seen[key_node.value]
                raise self.error(key_node, _join(path, key_node.value), f"duplicate key (first at line {first})")
            seen[key_node.value] = _line(key_node)
        try:
            self.loader.flatten_mapping(node)  # resolves `<<: *anchor` merges; explicit keys win
        except yaml.YAMLError as exc:
            raise self.error(node, path, f"bad merge: {getattr(exc, 'problem', None) or exc}") from None
        out: dict[str, object] = {}
        total = 1
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise self.error(key_node, path, "a key must be a plain name, not a list or a mapping")
            value, size = self.build(value_node, _join(path, key_node.value))
            out[key_node.value] = value
            total += size
        return out, total


# ---------------------------------------------------------------------------------------------------------------
# Validation errors -> lines


def _model_of(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _list_item_model(annotation: object) -> type[BaseModel] | None:
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return _model_of(args[0]) if args else None
    return None


def _prune_empty(data: object, model: type[BaseModel]) -> object:
    """Drop ``section:`` and ``list:`` keys left empty (null), so they mean "defaults" instead of a type error."""
    if not isinstance(data, dict):
        return data
    out: dict[object, object] = {}
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            out[key] = value
            continue
        sub = _model_of(field.annotation)
        item = _list_item_model(field.annotation)
        if value is None and (sub is not None or get_origin(field.annotation) is list):
            continue
        if sub is not None:
            out[key] = _prune_empty(value, sub)
        elif item is not None and isinstance(value, list):
            out[key] = [_prune_empty(v, item) for v in value]
        else:
            out[key] = value
    return out


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model that ``loc`` (without its last part) points into, for "did you mean"."""
    model: type[BaseModel] | None = Config
    for part in loc[:-1]:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        model = _model_of(field.annotation) or _list_item_model(field.annotation)
    return list(model.model_fields) if model is not None else []


def _walk(root: Node, loc: tuple[int | str, ...]) -> tuple[Node, int]:
    """The deepest node of ``loc`` that exists, and how many parts of ``loc`` it consumed.

    For a mapping entry the key node is returned for the last part: the line where the key was written.
    """
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    node = root
    for depth, part in enumerate(loc):
        if isinstance(node, MappingNode) and isinstance(part, str):
            match = None
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.value == part:
                    match = (key_node, value_node)  # the last one wins, as in the built dict
            if match is None:
                return node, depth
            if depth == len(loc) - 1:
                return match[0], depth + 1
            node = match[1]
        elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
        else:
            return node, depth
    return node, len(loc)


def _loc_text(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path = _join(path, part)
    return path


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _problem(err: Any) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else ""
        close = difflib.get_close_matches(key, _fields_at(loc), n=1, cutoff=0.6)
        return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        msg = "Input should be a mapping"
    if kind != "missing" and isinstance(err.get("input"), str | int | float | bool | type(None)):
        value = err["input"]
        if loc and loc[0] == "notify" and isinstance(value, str):
            value = redact_url(value)  # notification URLs hold tokens: never quoted back in full
        msg += f" (got {_short(value)})"
    return msg


def _validation_error(name: str, root: Node, exc: ValidationError) -> ConfigError:
    located = []
    for index, err in enumerate(exc.errors()):
        loc = tuple(err["loc"])
        node, _ = _walk(root, loc)
        located.append((_line(node), index, loc, err))
    located.sort(key=lambda item: (item[0], item[1]))
    errors = [ConfigError(name, _problem(err), line=line, key=_loc_text(loc) or None) for line, _, loc, err in located]
    first = errors[0]
    return ConfigError(first.file, first.problem, line=first.line, key=first.key, more=tuple(errors[1:]))


# ---------------------------------------------------------------------------------------------------------------
# Public API


def parse_config(text: str, name: str = RUN_DIR_FILE) -> Config:
    """Validate configuration text; ``name`` is the file name errors start with."""
    return _parse(text, name)[0]


def _parse(text: str, name: str) -> tuple[Config, Node | None]:
    """The configuration and its node tree (None for an empty file): what an untrusted file loses is said by line."""
    from yaml.nodes import MappingNode, ScalarNode

    root, loader = _compose(name, text)
    if root is None:
        return Config(), None
    if isinstance(root, ScalarNode) and root.tag == "tag:yaml.org,2002:null":
        return Config(), None
    if not isinstance(root, MappingNode):
        raise ConfigError(name, "the top level must be a mapping", line=_line(root))
    try:
        data, _ = _Builder(name, loader).build(root)
    except RecursionError:
        raise ConfigError(name, "nested too deeply", line=_line(root)) from None
    try:
        return Config.model_validate(_prune_empty(data, Config)), root
    except ValidationError as exc:
        raise _validation_error(name, root, exc) from None


def load_config(path: Path) -> Config:
    """Load and validate one configuration file; every problem is a one-line :class:`ConfigError`."""
    return _load(path)[0]


def _load(path: Path) -> tuple[Config, Node | None]:
    name = str(path)
    return _parse(_read_text(path, name), name)


def _with_run_dir(cfg: Config, file: Path, run_dir: Path) -> Config:
    """Store the absolute run directory: the file's own ``run_dir`` (relative to the file) wins over ``run_dir``."""
    if cfg.run_dir:
        where = os.path.abspath(file.expanduser().parent / Path(cfg.run_dir).expanduser())
    else:
        where = os.path.abspath(run_dir)
    return cfg.model_copy(update={"run_dir": where})


def resolve_config(run_dir: Path, config_path: Path | None, profile: str = "auto") -> tuple[Config, str]:
    """The configuration for ``run_dir`` and where it came from.

    Order: ``--config FILE`` (source ``"--config FILE"``), else ``RUN_DIR/rlwatch.yaml`` (source ``"rlwatch.yaml"``),
    else discovery (source ``"discovered"``). A ``profile`` other than ``"auto"`` replaces the file's label (and
    picks the profile discovery starts from). The returned ``cfg.run_dir`` is always absolute: a ``run_dir``
    written in a file wins (relative to that file), otherwise it is ``run_dir``.
    """
    if profile not in PROFILES:
        raise ConfigError("--profile", f"unknown profile {profile!r}; choose from: {', '.join(PROFILES)}")
    run_dir = run_dir.expanduser()
    file = run_dir / RUN_DIR_FILE
    root: Node | None = None
    if config_path is not None:
        cfg, root = _load(config_path)
        cfg = _with_run_dir(cfg, config_path, run_dir)
        source = f"--config {config_path}"
    elif os.path.lexists(file):
        cfg, root = _load(file)
        cfg = _with_run_dir(cfg, file, run_dir)
        source = RUN_DIR_FILE
    else:
        cfg = discover(run_dir, profile)
        source = "discovered"
    if source != "discovered":
        path = config_path if config_path is not None else file
        distrust = config_distrust(path, run_dir)
        ignored: tuple[str, ...] = ()
        if distrust is not None:
            cfg, ignored = _defanged(cfg, run_dir, source.removeprefix("--config "), root)
        provenance = _file_provenance(cfg, source, profile)
        cfg = cfg.with_provenance(replace(provenance, distrust=distrust, ignored=ignored))
    if profile != "auto":
        cfg = cfg.model_copy(update={"profile": profile})
    return cfg, source


def _defanged(cfg: Config, run_dir: Path, name: str, root: Node | None) -> tuple[Config, tuple[str, ...]]:
    """What an untrusted file may still decide: how the run is watched, not where rlwatch reads, whom it asks, which
    process it takes by pid, nor an expression that could keep it busy for ever. Its actions are refused by the
    actions API, which reads ``provenance.distrust``; here every key the models mark (:class:`Names`) is held to
    one rule, whatever section it is in: a path only inside the run directory, no pidfile, no URL, and only
    expressions RE2 can run (they are then run by RE2, rlwatch.common.patterns). What is dropped is returned, one
    line each (``FILE:LINE: key: why: not used``), for the report to show: a file whose keys silently did nothing
    would look like a run with nothing to see."""
    return _Confiner(Path(os.path.abspath(run_dir)), name, root).config(cfg)


_DROP = object()  # a marked value the untrusted file may not give: the key takes its default (a list item goes)
_WHY = {
    "pid": "names a process by pid",
    "remote": "an address rlwatch would send what it sees to",
}


class _Confiner:
    """The one rule of :func:`_defanged`, walked over the models' fields by what :func:`names_of` says they name."""

    def __init__(self, base: Path, name: str, root: Node | None) -> None:
        self.base = str(base)
        self.within = self.base  # where relative paths lead: the file's run_dir once it is known to be inside
        self.name = name
        self.root = root
        self.ignored: list[tuple[int, str]] = []  # (line, what): said in file order

    def config(self, cfg: Config) -> tuple[Config, tuple[str, ...]]:
        if cfg.run_dir is not None:
            if why := self._outside(cfg.run_dir):
                self._note(("run_dir",), why)
                cfg = cfg.model_copy(update={"run_dir": self.base})
            self.within = os.path.abspath(Path(cfg.run_dir or self.base).expanduser())
        walked = self._model(cfg, ())
        assert isinstance(walked, Config)  # every field of Config has a default: the whole is never dropped
        if walked.gpu.backend == "simulated":
            # Its state file (whatever its path) names the GPUs' processes by pid: NVML, or no GPUs, instead.
            self._note(("gpu", "backend"), "the simulated GPU state names processes by pid")
            walked = walked.model_copy(update={"gpu": walked.gpu.model_copy(update={"backend": "auto"})})
        return walked, tuple(line for _, line in sorted(self.ignored, key=lambda note: note[0]))

    def _note(self, loc: tuple[int | str, ...], why: str) -> None:
        line = None if self.root is None else _line(_walk(self.root, loc)[0])
        where = self.name if line is None else f"{self.name}:{line}"
        text = f"{where}: {_loc_text(loc)}: {why}: ignored"
        self.ignored.append((line or 0, _one_line(text)))

    def _outside(self, value: str) -> str | None:
        """Why a path (or glob) of the file leads outside the run directory, judged by its text: a glob by its part
        before the first wildcard; ``..`` anywhere, since a link on the way decides where it leads."""
        path = os.path.expanduser(value)
        said = repr(value) if len(value) <= 160 else repr(value[:159]) + "…"  # a path is read whole, or not at all
        if os.pardir in path.split(os.sep):
            return f"{said} climbs out with '..'"
        full = os.path.normpath(os.path.join(self.within, path))
        fixed: list[str] = []
        for part in full.split(os.sep):
            if glob.has_magic(part):
                break
            fixed.append(part)
        prefix = os.sep.join(fixed) or os.sep
        if prefix == self.base or prefix.startswith(self.base.rstrip(os.sep) + os.sep):
            return None
        return f"{said} is outside the run directory"

    def _value(self, value: object, marks: frozenset[str], loc: tuple[int | str, ...]) -> object:
        """``value`` as the untrusted file may give it, or ``_DROP``."""
        if isinstance(value, list):
            kept = [v for i, v in enumerate(value) if self._value(v, marks, (*loc, i)) is not _DROP]
            return value if len(kept) == len(value) else kept
        if not isinstance(value, str):
            return value
        why: str | None = None
        for what in ("pid", "remote"):
            if what in marks:
                why = _WHY[what]
        if why is None and "path" in marks:
            why = self._outside(value)
        if why is None and "pattern" in marks:
            why = bounded_problem(value)
        if why is None:
            return value
        self._note(loc, why)
        return _DROP

    def _model(self, model: BaseModel, loc: tuple[int | str, ...]) -> BaseModel | None:
        """``model`` with what it may not say dropped; None when a key it cannot do without was (the item goes)."""
        updates: dict[str, object] = {}
        for key, field in type(model).model_fields.items():
            value = getattr(model, key)
            here = (*loc, key)
            marks = names_of(field)
            if marks:
                default = field.get_default(call_default_factory=True)
                new = value if value is None or value == default else self._value(value, marks, here)
            elif isinstance(value, BaseModel):
                new = self._model(value, here)
            elif isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
                items = [self._model(v, (*here, i)) if isinstance(v, BaseModel) else v for i, v in enumerate(value)]
                new = [v for v in items if v is not None]
                new = value if len(new) == len(value) and all(a is b for a, b in zip(new, value, strict=True)) else new
            else:
                continue
            if new is _DROP or (new is None and value is not None):
                if field.is_required():
                    return None
                new = field.get_default(call_default_factory=True)
            if new is not value:
                updates[key] = new
        if not updates:
            return model
        out = model.model_copy(update=updates)
        dropped_pidfile = isinstance(model, ProcessRule) and model.pidfile is not None
        if isinstance(out, ProcessRule) and dropped_pidfile and out.pidfile is None and not out.cmdline_regex:
            # A rule with neither a pidfile nor an expression would take every process: the rule goes instead.
            self._note(loc, "nothing is left to select its processes by (the rule would take every process)")
            return None
        return out


def _file_provenance(cfg: Config, source: str, profile: str) -> Provenance:
    """A person's file is its own evidence: say which file, and which of its keys, so the report can show it."""
    name = source.removeprefix("--config ")
    why = f"--profile {profile}" if profile != "auto" else f"profile: {cfg.profile} in {name}"
    if cfg.server.expected is False:
        server = f"server.expected: false in {name}"
    elif cfg.server.url:
        server = f"server.url: {cfg.server.url} in {name}"
    elif cfg.server.expected:
        server = f"server.expected: true in {name} (no server.url yet)"
    else:
        server = f"no server.url in {name}"
    return Provenance(source=source, profile=(why,), server=(server,))


def resolve(run_dir: Path, path: str | Path) -> Path:
    """A path (or glob) of the configuration against a run directory; ``~`` is expanded."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else run_dir / p


def absolute(cfg: Config, path: str | Path) -> Path:
    """``resolve`` against the configuration's own run directory, normalised."""
    base = Path(cfg.run_dir).expanduser() if cfg.run_dir else Path.cwd()
    return Path(os.path.abspath(resolve(base, path)))


def _exists(pattern: Path) -> bool:
    text = str(pattern)
    if not glob.has_magic(text):
        return os.path.lexists(text)
    matches: Iterator[str] = iglob(text)
    return next(matches, None) is not None


def missing_paths(cfg: Config, run_dir: Path) -> list[str]:
    """One line per configured path that does not exist (yet): not an error, logs often appear later."""
    if cfg.run_dir is None:
        cfg = cfg.model_copy(update={"run_dir": os.path.abspath(run_dir.expanduser())})
    wanted: list[tuple[str, str]] = [(f"training.logs[{i}]", p) for i, p in enumerate(cfg.training.logs)]
    wanted += [(f"training.checkpoint_dirs[{i}]", p) for i, p in enumerate(cfg.training.checkpoint_dirs)]
    for key in ("recover_info", "config_file", "output_volume"):
        value = getattr(cfg.training, key)
        if value:
            wanted.append((f"training.{key}", value))
    if cfg.gpu.backend == "simulated" and cfg.gpu.simulated_state:
        wanted.append(("gpu.simulated_state", cfg.gpu.simulated_state))
    out = []
    for key, value in wanted:
        target = absolute(cfg, value)
        try:
            found = _exists(target)
        except OSError:
            found = False
        if not found:
            what = "matches nothing" if glob.has_magic(str(target)) else "does not exist"
            out.append(f"{key}: {value} {what} (yet)")
    return out
