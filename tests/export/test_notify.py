"""Notifications without a network: what is worth a message, how it reads, what never leaves, and the queue.

The clock is injected (FakeClock), the sender is a function the test controls; the real endpoints (a loopback HTTP
receiver, a local SMTP server, Apprise itself) are in test_notify_real.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import EventSummary, Finding, LogLine, ServerState, Severity, Snapshot
from rlwatch.common.textsafe import redact_url
from rlwatch.config.models import NotifyConfig
from rlwatch.discover.load import ConfigError, load_config, parse_config
from rlwatch.export.notify.delivery import Channel
from rlwatch.export.notify.notifications import Notifications
from rlwatch.export.notify.targets import Target, split_urls, targets_from
from rlwatch.export.notify.text import scrub, secrets_of, sendable_line
from rlwatch.export.notify.tracker import FindingTracker
from tests.simhost import wait_until

CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO


def snap(*findings: Finding, events: dict[str, EventSummary] | None = None) -> Snapshot:
    return Snapshot("pod-0", 1_763_716_800.0, "areal", "/data/run", findings=findings, events=events or {})


def brake(n: int, severity: Severity = WARN) -> Finding:
    code = "brake_no_relief" if severity is CRIT else "brake"
    return Finding(severity, code, f"Emergency brake fired {n} times (streak {n}).", 1_763_716_000.0)


class Sent:
    """A sender that records what it was given; it can be made to fail or to block until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, Severity]] = []
        self.fail_next = 0
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, url: str, title: str, body: str, severity: Severity, timeout: float) -> str | None:
        self.entered.set()
        self.release.wait(30)
        with self._lock:
            self.calls.append((url, title, body, severity))
            if self.fail_next:
                self.fail_next -= 1
                return f"HTTP 500 from {url}"
        return None

    def bodies(self) -> list[str]:
        with self._lock:
            return [c[2] for c in self.calls]


@pytest.fixture
def sent() -> Iterator[Sent]:
    s = Sent()
    yield s
    s.release.set()


def notifications(
    sent: Sent, clock: FakeClock, *targets: Target, **cfg: object
) -> Iterator[Notifications] | Notifications:
    base = {"update_every_s": 600.0, "clear_after_s": 60.0, "backoff_s": 0.001, "retries": 2}
    n = Notifications(
        list(targets) or [Target("json://127.0.0.1:9/hook/S3CRETT0KEN")],
        NotifyConfig.model_validate(base | cfg),
        host="pod-0",
        run_dir="/data/run",
        clock=clock,
        send=sent,
    )
    n.start()
    return n


# --------------------------------------------------------------------------------------------- secrets and text


def test_a_target_is_shown_by_its_scheme_only() -> None:
    assert redact_url("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/-100123") == "tgram://***"
    assert redact_url("  Slack://T1/B2/C3") == "slack://***"
    assert redact_url("no scheme at all") == "***"
    assert Target("discord://id/token", name="ops channel").shown == "ops channel"


def test_scrub_cuts_the_target_url_credentials_and_token_values() -> None:
    url = "json://hooks.example.com/v1/AbCdEf123456"
    text = (
        f"failed to send to {url}: see http://alice:hunter22@proxy:3128/x?token=zzz, api_key=sk-123456 "
        "--hf-token hf_abcdefgh Authorization: Bearer abcdefghijkl"
    )
    out = scrub(text, secrets_of(url))
    for secret in ("AbCdEf123456", "hunter22", "alice", "token=zzz", "sk-123456", "hf_abcdefgh", "abcdefghijkl"):
        assert secret not in out, (secret, out)
    assert "proxy:3128/x" in out  # where, without who and how


def test_log_text_is_one_clean_trimmed_line_and_pings_nobody() -> None:
    raw = "boom\x1b[31m red\x1b]0;title\x07\nsecond line\r\n@everyone look <!channel> " + "x" * 500
    out = sendable_line(raw, 120)
    assert "\x1b" not in out and "\n" not in out and "\r" not in out
    assert len(out) == 120 and out.endswith("…")
    assert "@everyone" not in out and "<!channel>" not in out
    assert out.startswith("boom red second line @\u200beveryone")


def test_targets_come_from_the_file_the_flag_and_the_environment_each_once() -> None:
    cfg = NotifyConfig.model_validate({"targets": [{"url": "json://a/1", "min_severity": "critical"}]})
    got = targets_from(cfg, ["ntfy://topic", "json://a/1"], "mailto://u:p@h, json://b/2\n  ntfy://topic")
    assert [(t.url, t.min_severity) for t in got] == [
        ("json://a/1", "critical"),
        ("ntfy://topic", "warning"),
        ("mailto://u:p@h", "warning"),
        ("json://b/2", "warning"),
    ]
    assert split_urls(None) == [] and split_urls(" , ") == []


# ------------------------------------------------------------------------------------------------------ config


def test_notify_section_is_validated_with_file_and_line_and_never_quotes_a_url(tmp_path: Path) -> None:
    cfg = parse_config(
        "notify:\n  targets:\n    - url: json://h/t\n      min_severity: critical\n      name: ops\n"
        "  update_every_s: 300\n  heartbeat: https://hc-ping.com/uuid\n"
    )
    assert cfg.notify.targets[0].min_severity == "critical" and cfg.notify.heartbeat == "https://hc-ping.com/uuid"
    bad = tmp_path / "rlwatch.yaml"
    bad.write_text("notify:\n  targets:\n    - url: json://h/t\n      min_sev: info\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(err.value) == (f"{bad}:4: notify.targets[0].min_sev: unknown key (did you mean 'min_severity'?)")
    bad.write_text("notify:\n  heartbeat: ftp://user:S3CRET@host/ping\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(err.value).startswith(f"{bad}:2: notify.heartbeat: the heartbeat is an http:// or https:// URL")
    assert "S3CRET" not in str(err.value)
    bad.write_text("notify:\n  targets:\n    - url: just-a-T0KEN-here\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert "T0KEN" not in str(err.value) and ":3: notify.targets[0].url:" in str(err.value)
    bad.write_text("notify:\n  retries: -1\n")
    with pytest.raises(ConfigError, match=r":2: notify.retries: "):
        load_config(bad)


# ----------------------------------------------------------------------------------------------------- tracker


def test_a_finding_is_told_once_then_updated_at_most_every_n_and_recovery_is_one_message() -> None:
    clock = FakeClock()
    t = FindingTracker(update_every_s=600, clear_after_s=60, clock=clock)
    assert [c for c, _ in t.observe([brake(1)])] == ["new"]
    assert t.observe([brake(1)]) == []
    changes = []
    for n in range(2, 1202):  # a brake event every second for 20 minutes
        clock.advance(1)
        changes += [c for c, _ in t.observe([brake(n)])]
    assert changes == ["update", "update"]  # at 600 s and 1200 s
    clock.advance(30)
    assert t.observe([]) == []  # gone, not yet for clear_after_s
    assert [c for c, _ in t.observe([brake(1201)])] == []  # back within it: the same finding, nothing to say
    clock.advance(1)
    assert t.observe([]) == []
    clock.advance(60)
    gone = t.observe([])
    assert [c for c, _ in gone] == ["recovered"] and gone[0][1].worst_sent is WARN
    assert t.observe([]) == []


def test_worse_is_told_at_once_but_only_beyond_what_was_told() -> None:
    clock = FakeClock()
    t = FindingTracker(update_every_s=600, clear_after_s=60, clock=clock)
    t.observe([brake(3)])
    clock.advance(1)
    worse = t.observe([brake(10, CRIT)])  # the brake storm stops helping: same story, now critical
    assert [(c, r.code, r.severity) for c, r in worse] == [("worse", "brake_no_relief", CRIT)]
    for n in range(11, 40):  # flapping between warning and critical is not news every time
        clock.advance(1)
        assert t.observe([brake(n, WARN if n % 2 else CRIT)]) == []


def test_a_storm_of_findings_is_a_bounded_number_of_messages(sent: Sent) -> None:
    clock = FakeClock()
    n = notifications(sent, clock, Target("json://x/1", "info"))
    assert isinstance(n, Notifications)
    many = [Finding(CRIT, f"kind_{i}", f"failure number {i}", None) for i in range(1000)]
    notice = n.observe(snap(*many), "nothing yet")
    assert notice is not None and len(notice.items) == 1000
    for i in range(1000):  # and 1000 rounds of a growing brake count
        clock.advance(1)
        n.observe(snap(*many, brake(i)), "nothing yet")
    wait_until(n.idle, 10)
    assert len(sent.calls) == 3  # the 1000 at once, the brake when it appeared, one update after 600 s
    title, body = sent.calls[0][1], sent.calls[0][2]
    assert title == "rlwatch pod-0: CRITICAL 1000 new"
    assert body.count("\n- [CRITICAL] new: failure number") == 10 and "- … and 990 more" in body
    n.close()


# ----------------------------------------------------------------------------------------------------- messages


def test_a_message_says_host_run_what_since_done_and_how_to_look(sent: Sent) -> None:
    clock = FakeClock()
    n = notifications(sent, clock)
    assert isinstance(n, Notifications)
    n.observe(snap(brake(951, CRIT)), "last action: restart-workers on worker-1: ok")
    wait_until(lambda: sent.calls, 10)
    url, title, body, severity = sent.calls[0]
    assert severity is CRIT and url == "json://127.0.0.1:9/hook/S3CRETT0KEN"
    assert title == "rlwatch pod-0: CRITICAL new: Emergency brake fired 951 times (streak 951)."
    lines = body.splitlines()
    assert lines[0] == "host: pod-0" and lines[1] == "run: /data/run"
    assert lines[2] == "what: new: Emergency brake fired 951 times (streak 951)."
    assert lines[3].startswith("since: ") and "ago;" in lines[3]
    assert lines[-2] == "done: last action: restart-workers on worker-1: ok"
    assert lines[-1] == "look: rlwatch report /data/run"
    n.close()


def test_log_lines_are_sent_only_when_configured_and_then_cleaned(sent: Sent) -> None:
    line = LogLine("/data/run/train.log", 7, "emergency brake \x1b[31mtoken=abc123 @here", 0.0)
    ev = EventSummary("emergency_brake", WARN, 3, 0.0, 0.0, 1.0, 3, {"/data/run/train.log": 3}, (line,))
    for include, expect in ((False, False), (True, True)):
        sent.calls.clear()
        n = notifications(sent, FakeClock(), include_lines=include)
        assert isinstance(n, Notifications)
        n.observe(snap(brake(3), events={"emergency_brake": ev}), "nothing")
        wait_until(lambda: sent.calls, 10)
        body = sent.calls[0][2]
        assert ("train.log:7: emergency brake" in body) is expect
        assert "abc123" not in body and "\x1b" not in body and "@here" not in body
        n.close()


def test_each_target_gets_its_severities_and_recovery_goes_where_the_alarm_went(sent: Sent) -> None:
    clock = FakeClock()
    pager = Target("json://pager/P4GERT0KEN", "critical")
    chat = Target("json://chat/CH4TT0KEN", "info")
    n = notifications(sent, clock, pager, chat, clear_after_s=0)
    assert isinstance(n, Notifications)
    n.observe(snap(Finding(WARN, "disk_low", "Disk almost full.", None)), "nothing")
    n.observe(snap(), "nothing")  # recovered
    n.observe(snap(Finding(CRIT, "server_down", "The inference server is down.", None)), "nothing")
    n.observe(snap(), "nothing")
    wait_until(lambda: len(sent.calls) == 6 and n.idle(), 10)
    to_pager = [c[1] for c in sent.calls if c[0] == pager.url]
    to_chat = [c[1] for c in sent.calls if c[0] == chat.url]
    assert to_pager == [
        "rlwatch pod-0: CRITICAL new: The inference server is down.",
        "rlwatch pod-0: recovered: The inference server is down.",
    ]
    assert len(to_chat) == 4 and to_chat[1] == "rlwatch pod-0: recovered: Disk almost full."
    n.close()


def test_actions_and_give_ups_are_told_at_once(sent: Sent) -> None:
    n = notifications(sent, FakeClock())
    assert isinstance(n, Notifications)
    base = {"policy": "brake", "key": "restart-workers:worker-1", "action": "restart-workers"}
    n.record({"type": "action", "ok": True, "skipped": False, "message": "worker-1 restarted"} | base)
    n.record({"type": "action", "ok": None, "skipped": True, "message": "skipped"} | base)
    n.record({"type": "gave_up", "reason": "3 restarts in 12 min"} | base)
    n.record({"type": "policy", "decision": "wait"} | base)
    wait_until(lambda: len(sent.calls) == 2 and n.idle(), 10)
    assert sent.calls[0][1] == (
        "rlwatch pod-0: WARNING acted: restart-workers on restart-workers:worker-1 (policy brake): worker-1 restarted"
    )
    assert sent.calls[1][3] is CRIT and "GAVE UP: the watchdog gave up on restart-workers:worker-1" in sent.calls[1][1]
    assert "done: nothing more until a person runs `rlwatch act rearm`" in sent.calls[1][2]
    n.close()


# ------------------------------------------------------------------------------------------------------ queue


def test_a_full_queue_drops_the_oldest_and_counts_and_put_never_blocks(sent: Sent) -> None:
    sent.release.clear()  # the endpoint hangs
    ch = Channel(
        Target("json://h/T0KEN12345"),
        NotifyConfig(queue_size=5, retries=0),
        send=sent,
        clock=FakeClock(),
        secrets=[],
    )
    ch.start()
    ch.put("first", "b", WARN)
    assert sent.entered.wait(10)  # the first is in flight, stuck
    done = threading.Event()

    def feed() -> None:
        for i in range(100):
            ch.put(f"m{i}", "b", WARN)
        done.set()

    threading.Thread(target=feed, daemon=True).start()
    assert done.wait(5), "put blocked on a hanging endpoint"
    assert ch.snapshot().dropped == 95
    sent.release.set()
    wait_until(ch.idle, 10)
    assert [c[1] for c in sent.calls] == ["first", "m95", "m96", "m97", "m98", "m99"]
    ch.close()


def test_a_failing_delivery_is_retried_with_backoff_and_the_error_is_shown_redacted(sent: Sent) -> None:
    clock = FakeClock()
    n = notifications(sent, clock, retries=2)
    assert isinstance(n, Notifications)
    sent.fail_next = 2
    n.observe(snap(brake(1)), "nothing")
    wait_until(lambda: n.idle() and len(sent.calls) == 3, 10)
    st = n.channels[0].snapshot()
    assert (st.sent, st.failed, st.error) == (1, 0, None)
    sent.fail_next = 3  # every attempt of the next message fails
    clock.advance(1)
    n.observe(snap(brake(1, CRIT)), "nothing")
    wait_until(lambda: n.idle() and len(sent.calls) == 6, 10)
    error = n.error()
    assert error is not None and error == "json://***: HTTP 500 from ***"
    assert "S3CRETT0KEN" not in error
    state = n.state()
    assert state["targets"][0]["failed"] == 1 and state["targets"][0]["name"] == "json://***"
    assert "S3CRETT0KEN" not in repr(state)
    n.close()


# ----------------------------------------------------------------------------------------------- the dashboard


def test_the_dashboard_shows_the_targets_the_last_message_and_the_heartbeat() -> None:
    from rlwatch.common.state import NotifyStatus, WatchdogStatus
    from rlwatch.widgets.process_panel import watchdog_line

    now = 1_763_716_800.0
    ns = NotifyStatus(
        ("json://***", "ops"),
        now - 60,
        "rlwatch pod-0: CRITICAL new: \x1b[31mserver down",
        None,
        "https://***",
        now - 5,
    )
    wd = WatchdogStatus(running=True, pid=42, since=now - 3600, heartbeat_age_s=1.0, notify=ns)
    line = watchdog_line(wd, now)
    assert line is not None
    text = line.plain
    assert "notify json://***, ops  last " in text and "CRITICAL new: server down" in text and "\x1b" not in text
    assert "heartbeat https://***  last ping " in text
    failing = watchdog_line(
        WatchdogStatus(
            running=True,
            pid=42,
            since=None,
            heartbeat_age_s=1.0,
            notify=NotifyStatus(
                ("tgram://***",), error="tgram://***: HTTP 500", heartbeat="https://***", heartbeat_error="timed out"
            ),
        ),
        now,
    )
    assert failing is not None and "FAILING: tgram://***: HTTP 500" in failing.plain
    assert "heartbeat https://***  FAILING: timed out" in failing.plain


def test_refused_connections_then_the_probe_saying_down_are_one_story_never_a_false_recovery() -> None:
    clock = FakeClock()
    t = FindingTracker(update_every_s=600, clear_after_s=60, clock=clock)
    refused = Finding(CRIT, "connection_refused", "88 connection-refused errors: the server is probably gone.", 1.0)
    down = Finding(CRIT, "server_down", "Inference server http://127.0.0.1:30000 is down since 05:09.", 1.0)
    assert [c for c, _ in t.observe([refused])] == ["new"]
    clock.advance(5)
    assert t.observe([down]) == []  # the same story at the same severity: nothing new
    clock.advance(120)
    assert t.observe([down]) == []  # and never "recovered" while the server stays down


def test_nothing_is_told_before_the_backlog_is_read_and_the_server_probed(sent: Sent) -> None:
    clock = FakeClock()
    n = notifications(sent, clock)
    assert isinstance(n, Notifications)
    try:
        crash = Finding(CRIT, "torchrun_failed", "torchrun's root cause: rank 0 (exit code 1).", 1.0)
        reading = replace(snap(crash), backlog=(100, 1000))
        assert n.observe(reading, "nothing") is None  # half a backlog is not a picture of now
        unprobed = ServerState(kind="sglang", url="http://127.0.0.1:30000", up=None, down_since=None, pid=None)
        assert n.observe(replace(snap(crash), server=unprobed), "nothing") is None
        probed = replace(unprobed, up=True)
        told = n.observe(replace(snap(crash), server=probed), "nothing")
        assert told is not None and [i.code for i in told.items] == ["torchrun_failed"]
        wait_until(lambda: len(sent.calls) == 1, 10)
    finally:
        n.close()
