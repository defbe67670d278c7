"""The one redaction: every fake secret in every form is cut, and what a diagnosis needs is kept."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.redact import MASK, clean_text, redact, redact_argv, redacted
from rlwatch.common.state import Finding, Severity
from tests.secrets_corpus import HF, LINES, SECRETS, WANDB

REAL = Path(__file__).resolve().parent.parent / "real"


@pytest.mark.parametrize("line", LINES)
def test_no_fake_secret_survives(line: str) -> None:
    out = redact(line)
    leaked = [s for s in SECRETS if s in out]
    assert leaked == [], out
    assert MASK in out


def test_the_diagnosis_keeps_its_meaning() -> None:
    out = redact(LINES[0])
    assert out.startswith("RuntimeError: download failed HF_TOKEN=*** WANDB_API_KEY=*** ")
    assert "Authorization: Bearer ***" in out
    assert redact(LINES[1]) == "python3 train.py --hf_token *** --wandb_key=*** --openai-api-key *** --lr 1e-5"
    assert "'eos_token': '</s>'" in redact(LINES[7])  # a special token is not a secret
    assert "https://***@hub.example.com/api?token=***&x=1" in redact(LINES[10])


@pytest.mark.parametrize(
    "text",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB",
        "KeyError: 'actor/pg_loss'",
        "max_tokens=512 num_tokens: 100 pad_token_id=0 tokenizer=Qwen/Qwen2.5-7B",
        "step:12 - actor/pg_loss:0.013 - actor/kl_loss:0.001 - critic/score/mean:0.41",
        "{'loss': 0.0123, 'grad_norm': 1.25, 'learning_rate': 1e-06, 'epoch': 0.5}",
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout",
        "sort key: 3 partition key: a primary_key=id",
        "token embeddings resized to 151936",
    ],
)
def test_ordinary_log_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_real_framework_output_is_not_mangled() -> None:
    """Over every line of the real runs kept as fixtures (no secrets in them), redaction changes nothing."""
    changed = []
    for path in sorted(REAL.rglob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if redact(line) != line:
                changed.append((path.name, line))
    assert changed == []


def test_argv_masks_the_word_after_a_secret_flag() -> None:
    argv = ["python3", "train.py", "--hf_token", "plainvalue", "--wandb-key", WANDB, "--lr", "1e-5", "--api_key=x1"]
    assert redact_argv(argv) == [
        "python3",
        "train.py",
        "--hf_token",
        MASK,
        "--wandb-key",
        MASK,
        "--lr",
        "1e-5",
        "--api_key=***",
    ]
    assert redact_argv(["--eos_token", "</s>", "--max-tokens", "512"]) == ["--eos_token", "</s>", "--max-tokens", "512"]


def test_clean_text_strips_escapes_and_keeps_lines() -> None:
    assert clean_text("a\x1b[31mred\x1b[0m\tb\nc\x1b]0;title\x07d\x07") == "ared\tb\ncd"


@dataclass(frozen=True, slots=True)
class _Record:
    name: str
    severity: Severity
    words: tuple[str, ...]
    extra: dict[str, str]


def test_records_are_redacted_through_and_through() -> None:
    rec = _Record(f"x HF_TOKEN={HF}", Severity.CRITICAL, (f"--hf_token={HF}", "ok"), {"k": f"Bearer {WANDB}\x1b[2J"})
    out = redacted(rec)
    assert HF not in repr(out) and WANDB not in repr(out) and "\x1b" not in repr(out)
    assert out.severity is Severity.CRITICAL and out.words[1] == "ok"
    finding = Finding(Severity.WARNING, "last_exception", f"ValueError: bad HF_TOKEN={HF}", None)
    assert redacted(finding).message == "ValueError: bad HF_TOKEN=***"
    untouched = Finding(Severity.INFO, "x", "nothing secret", None)
    assert redacted(untouched) is untouched  # nothing to change: the same record, no copy


@given(st.text())
def test_redaction_never_raises_and_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_a_private_key_spread_over_lines_is_cut_and_the_lines_keep_their_count() -> None:
    from rlwatch.common.redact import redact_lines
    from tests.secrets_corpus import PRIVATE_KEY_BODY

    lines = [
        "before",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        PRIVATE_KEY_BODY,
        PRIVATE_KEY_BODY[::-1],
        "-----END OPENSSH PRIVATE KEY-----",
        "after",
    ]
    out = redact_lines(lines)
    assert len(out) == len(lines) and out[0] == "before" and out[-1] == "after"
    assert PRIVATE_KEY_BODY not in "\n".join(out) and PRIVATE_KEY_BODY[::-1] not in "\n".join(out)
    assert out[2] == out[3] == MASK


def test_a_record_is_redacted_once_per_distinct_string() -> None:
    """A report repeats the same file names, titles and keys hundreds of times: each distinct string is redacted
    once per call, and every copy of it comes out redacted."""
    seen: list[str] = []

    def text(s: str) -> str:
        seen.append(s)
        return redact(s)

    line = f"ValueError: bad token --hf_token {HF}"
    record = {"incidents": [{"file": "trainer.log", "title": line, "files": {"trainer.log": 3}} for _ in range(50)]}
    out = redacted(record, text)
    assert sorted(seen) == sorted({"incidents", "file", "trainer.log", "title", line, "files"})
    assert all(HF not in inc["title"] and MASK in inc["title"] for inc in out["incidents"])
    assert all(inc["files"] == {"trainer.log": 3} for inc in out["incidents"])
