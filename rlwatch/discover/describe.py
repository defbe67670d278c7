"""What a configuration watches, in words a person can check, and the ``rlwatch.yaml`` that ``rlwatch init`` writes.

Discovery (:mod:`rlwatch.discover.discovery`) decides; this module only shows what was decided, for any
configuration, discovered or loaded. :func:`describe` says in lines a person can check what is watched and whether
it is there now, each choice with the evidence for it; :func:`dump_config` writes the values that differ from the
defaults as YAML that loads back (:func:`rlwatch.discover.load.parse_config`), with that evidence as comments.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from rlwatch.common.globbing import iglob
from rlwatch.config.models import Config


def _abs(cfg: Config, path: str) -> str:
    p = Path(path).expanduser()
    return str(p) if p.is_absolute() else os.path.join(cfg.run_dir or os.getcwd(), path)


def _count(pattern: str, limit: int = 1000) -> int:
    n = 0
    try:
        for _ in iglob(pattern):
            n += 1
            if n >= limit:
                break
    except OSError:
        return n
    return n


def describe_config(cfg: Config) -> list[str]:
    """Human lines saying what this configuration watches and whether it is there now."""
    prov = cfg.provenance
    lines = [f"profile: {cfg.profile}", f"run directory: {cfg.run_dir or os.getcwd()}"]
    if not prov.run_found:
        lines.append(f"no training run found here: {prov.looked_for}")
    lines += [f"  because {why}" for why in prov.profile]
    for pattern in cfg.training.logs:
        n = _count(_abs(cfg, pattern))
        lines.append(f"logs: {pattern} ({n}{'+' if n >= 1000 else ''} file{'s' if n != 1 else ''} now)")
    if not cfg.training.logs:
        lines.append("logs: none configured")
    for directory in cfg.training.checkpoint_dirs:
        there = os.path.isdir(_abs(cfg, directory))
        lines.append(f"checkpoints: {directory}{'' if there else ' (not there yet)'}")
    if cfg.training.recover_info:
        there = _count(_abs(cfg, cfg.training.recover_info), 1) > 0
        lines.append(f"recover info: {cfg.training.recover_info}{'' if there else ' (not there yet)'}")
    if cfg.training.config_file:
        lines.append(f"training config: {cfg.training.config_file}")
    if cfg.server.url and cfg.server_expected:
        lines.append(
            f"server: {cfg.server.kind or 'unknown kind'} at {cfg.server.url} (health {cfg.server.health_path})"
        )
    elif cfg.server_expected:
        lines.append(f"server: {cfg.server.kind or 'unknown kind'} expected, address not known")
    else:
        lines.append("server: none expected")
    lines += [f"  because {why}" for why in prov.server]
    for rule in cfg.processes:
        how = f"cmdline /{rule.cmdline_regex}/" if rule.cmdline_regex else f"pidfile {rule.pidfile}"
        lines.append(f"process {rule.role}: {how}{' (expected to run)' if rule.expected else ''}")
    if cfg.gpu.backend != "auto":
        lines.append(f"gpu: {cfg.gpu.backend}")
    if cfg.ray.session_logs:
        lines.append(f"ray: session logs {cfg.ray.session_logs}")
    elif cfg.ray.enabled:
        lines.append("ray: session logs and State API of the cluster found running (else /tmp/ray/session_latest)")
    return lines


HEADER = """\
# rlwatch configuration for this run directory.
# Only values that differ from the built-in defaults are written here; every key, its default and what it
# means are in configs/reference.yaml. Paths are relative to this directory. Edit freely: rlwatch reads this
# file instead of discovering the run again.
"""


def _comment(text: str) -> str:
    """One comment line's text: a file name may hold a newline, which must not end the comment."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _evidence_comments(cfg: Config) -> str:
    """Why discovery chose what it wrote, as comments: a person checks it, and edits the file where it is wrong."""
    prov = cfg.provenance
    if prov.source != "discovered":
        return ""
    lines = []
    if not prov.run_found:
        lines.append(f"# No training run was found here when this was written: {prov.looked_for}.")
    if prov.profile:
        lines.append(f"# profile {cfg.profile}, because:")
        lines += [f"#   - {why}" for why in prov.profile]
    server = "expected" if cfg.server_expected else "none expected"
    lines.append(f"# server: {server}, because:")
    lines += [f"#   - {why}" for why in prov.server]
    return "".join(_comment(line) + "\n" for line in lines)


def dump_config(cfg: Config) -> str:
    """YAML of the values that differ from the defaults, under a header; loads back to ``cfg`` (less run_dir).

    ``run_dir`` is left out: the file lives in the run directory, and a copied directory should keep working. The
    evidence for each choice discovery made is written as comments under the header.
    """
    head = HEADER + _evidence_comments(cfg)
    data = cfg.model_dump(mode="json", exclude_defaults=True, exclude={"run_dir"})
    if not data:
        return head
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    return f"{head}\n{body}"
