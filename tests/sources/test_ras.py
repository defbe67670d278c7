"""NCCL's RAS service (sources/ras): its real answers parsed (tests/real/job-2node-1gpu and collective-2gpu: plain
STATUS, VERBOSE STATUS and JSON from NCCL 2.28.9), and the client asked over a real loopback socket served by a
thread that answers with those same bytes — never on a crashing NCCL version, an unknown one, or a port another user
serves."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil
import pytest

from rlwatch.common.state import JobInfo, JobRank, RasState, RunState, Severity, Snapshot
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.collectives import collectives, ras_issue
from rlwatch.engine.job import JobWatch
from rlwatch.sources import procfs, ras
from tests.simhost import wait_until
from tests.unprivileged import CAN_DROP_PRIVILEGES, NOBODY, _interpreters, as_nobody

REAL = Path(__file__).resolve().parents[1] / "real"
JOB_STALL = REAL / "job-2node-1gpu" / "job-stall" / "ras-status.txt"
JOB_MISMATCH = REAL / "job-2node-1gpu" / "job-mismatch" / "ras-status.txt"


def _sections(path: Path) -> dict[str, str]:
    """The capture's answers, each as the service sent it: "plain", "verbose", "json"."""
    text = path.read_text()
    parts = re.split(r"^===== (.*?): .*$\n", text, flags=re.M)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        key = "json" if "json" in name else "verbose" if "VERBOSE" in name else "plain"
        out[key] = body.rstrip("\n") + "\n"
    return out


# ---------------------------------------------------------------------------------------------- the real answers
@pytest.mark.parametrize("form", ["plain", "verbose", "json"])
def test_the_stalled_job_s_answer_names_rank_1_behind_rank_0_in_every_form(form: str) -> None:
    answer = ras.parse_answer(_sections(JOB_STALL)[form])
    assert answer.version == "2.28.9" and answer.form == ("json" if form == "json" else "text")
    state = ras.to_state(answer, 100.0, world_size=2)
    assert state.error is None and state.operation == "AllReduce"
    assert [(r.rank, r.collectives, r.status, r.node, r.pid, r.gpu) for r in state.ranks] == [
        (0, 11, "ok", "127.0.0.1", 22, 0),
        (1, 10, "behind", "127.0.0.1", 21, 0),
    ]
    assert state.summary is not None and "different AllReduce operation counts" in state.summary


@pytest.mark.parametrize("case", ["stall", "straggler"])
def test_the_two_gpu_captures_parse_alike_in_text_and_json(case: str) -> None:
    answers = _sections(REAL / "collective-2gpu" / case / "ras-status.txt")
    states = [ras.to_state(ras.parse_answer(answers[f]), 0.0, 2) for f in ("plain", "json")]
    assert [[(r.rank, r.collectives, r.status) for r in s.ranks] for s in states] == [
        [(r.rank, r.collectives, r.status) for r in states[0].ranks]
    ] * 2
    assert states[0].ranks[1].status == "behind"


def test_a_healthy_answer_names_no_rank_behind() -> None:
    answers = _sections(REAL / "collective-2gpu" / "healthy" / "ras-status.txt")
    text = ras.to_state(ras.parse_answer(answers["plain"]), 0.0, 2)
    assert text.ranks == () and text.operation is None
    assert text.summary == "every communicator runs, with equal operation counts"
    js = ras.to_state(ras.parse_answer(answers["json"]), 0.0, 2)
    assert {r.status for r in js.ranks} == {"ok"} and js.operation is None


def test_the_mismatch_s_answer_says_the_error_and_no_count_differs() -> None:
    # RAS counts operations, it does not compare sizes: both ranks at AllReduce 13, rank 0's "Invalid usage".
    for form in ("plain", "json"):
        state = ras.to_state(ras.parse_answer(_sections(JOB_MISMATCH)[form]), 0.0, 2)
        assert state.operation is None and all(r.status == "ok" for r in state.ranks)
        assert state.summary is not None and "Rank 0 reported Invalid usage" in state.summary


# A large job's answer, written with the format strings of NCCL's src/ras/client_support.cc (rasClientRunComms): the
# majority is one line with no ranks named, the outliers are named one by one; a process that did not answer, and one
# RAS considers dead.
LARGE = """NCCL version 2.25.1+cuda12.8
CUDA runtime version 12080, driver version 12080

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
     64          8            1        512      512

Communicators... (0.231s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1        64         8       512       512   RUNNING  INCOMPLETE

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 4411 on node 10.0.0.9 managing GPU 5

#0-0 (0f00dcafe0000001) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 69 -- GPU 5 managed by process 4411 on node 10.0.0.9

Warnings
========

#0-0 (0f00dcafe0000001) MISMATCH
  Communicator ranks have different AllReduce operation counts
  510 ranks have launched up to operation 4812
  Rank 3 has launched up to operation 4811 -- GPU 3 managed by process 1234 on node 10.0.0.2

"""


def test_a_large_job_s_unnamed_majority_fills_every_other_rank() -> None:
    state = ras.to_state(ras.parse_text(LARGE), 0.0, world_size=512)
    by_rank = {r.rank: r for r in state.ranks}
    assert len(by_rank) == 512 and state.operation == "AllReduce" and state.version == "2.25.1"
    assert (by_rank[3].collectives, by_rank[3].status, by_rank[3].node, by_rank[3].pid) == (
        4811,
        "behind",
        "10.0.0.2",
        1234,
    )
    assert (by_rank[69].status, by_rank[69].node, by_rank[69].gpu) == ("dead", "10.0.0.9", 5)
    assert {by_rank[r].collectives for r in by_rank if r not in (3, 69)} == {4812}


# ------------------------------------------------------------------------------------------ a real loopback server
@dataclass
class RasServer:
    """A thread with a listening socket that answers like NCCL's RAS thread: one line per command, then the
    status (``body``), then it closes the connection."""

    body: str
    json_body: str | None = None
    silent: bool = False  # accepts and never answers
    commands: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                got, fmt = b"", "text"
                conn.settimeout(10)
                while not got.endswith(b"STATUS\n"):
                    b = conn.recv(4096)
                    if not b:
                        break
                    got += b
                lines = got.decode().splitlines()
                self.commands.append(lines)
                if self.silent:
                    time.sleep(0)  # holds the connection open until the client gives up and closes it
                    conn.recv(1)
                    continue
                out = []
                for line in lines:
                    if line.startswith("CLIENT PROTOCOL"):
                        out.append("SERVER PROTOCOL 2\n")
                    elif line.startswith(("TIMEOUT", "SET FORMAT")):
                        fmt = "json" if line.endswith("json") else fmt
                        out.append("OK\n")
                out.append(self.json_body if fmt == "json" and self.json_body else self.body)
                conn.sendall("".join(out).encode())

    def close(self) -> None:
        self.sock.close()


def _status_body(section: str) -> str:
    """A captured answer without the protocol's own lines (the server above says those)."""
    return "".join(
        line + "\n" for line in section.splitlines() if not line.startswith("SERVER PROTOCOL") and line != "OK"
    )


@pytest.fixture
def server() -> Iterator[RasServer]:
    answers = _sections(JOB_STALL)
    s = RasServer(_status_body(answers["plain"]), _status_body(answers["json"]))
    yield s
    s.close()


def _env(port: int) -> dict[int, dict[str, str]]:
    return {0: {"RANK": "0", "NCCL_RAS_ADDR": f"127.0.0.1:{port}"}}


def test_asked_over_a_real_socket_in_json_where_the_version_has_it(server: RasServer) -> None:
    state = ras.ask_ras(_env(server.port), {os.geteuid()}, 5.0, version="2.28.9", world_size=2)
    assert state.error is None and [(r.rank, r.collectives, r.status) for r in state.ranks] == [
        (0, 11, "ok"),
        (1, 10, "behind"),
    ]
    (sent,) = server.commands
    assert sent[0] == "CLIENT PROTOCOL 2" and sent[-2:] == ["SET FORMAT json", "STATUS"]
    assert sent[1].startswith("TIMEOUT ")


def test_asked_in_text_before_2_28_7(server: RasServer) -> None:
    state = ras.ask_ras(_env(server.port), {os.geteuid()}, 5.0, version="2.25.1", world_size=2)
    assert state.error is None and state.operation == "AllReduce" and state.ranks[1].status == "behind"
    (sent,) = server.commands
    assert "SET FORMAT json" not in sent and sent[-1] == "STATUS"


@pytest.mark.parametrize("version", ["2.26.5", "2.27.3", "2.27.7"])
def test_never_asked_on_a_version_whose_ras_crashes_jobs(server: RasServer, version: str) -> None:
    state = ras.ask_ras(_env(server.port), {os.geteuid()}, 5.0, version=version)
    assert state.ranks == () and state.error is not None
    assert state.error.startswith(f"NCCL {version}: a RAS query crashes jobs there (NVIDIA/nccl#")
    assert server.commands == []


def test_never_asked_when_the_version_is_not_known(server: RasServer) -> None:
    state = ras.ask_ras(_env(server.port), {os.geteuid()}, 5.0, version=None)
    assert state.error is not None and "version is not known" in state.error and server.commands == []


def test_never_asked_where_the_ranks_switched_it_off(server: RasServer) -> None:
    env = {0: {**_env(server.port)[0], "NCCL_RAS_ENABLE": "0"}}
    state = ras.ask_ras(env, {os.geteuid()}, 5.0, version="2.28.9")
    assert state.error == "the ranks set NCCL_RAS_ENABLE=0: RAS is off" and server.commands == []


def test_a_service_that_never_answers_costs_its_timeout_and_no_more() -> None:
    s = RasServer("", silent=True)
    try:
        t0 = time.monotonic()
        state = ras.ask_ras(_env(s.port), {os.geteuid()}, 5.0, version="2.28.9", timeout_s=1.0)
        assert time.monotonic() - t0 < 5.0
        assert state.error == "no whole answer within 1 s"
    finally:
        s.close()


def test_nothing_listening_is_said_in_one_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    state = ras.ask_ras(_env(port), {os.geteuid()}, 5.0, version="2.28.9")
    assert state.error == f"nothing listens on port {port} (RAS off, or the ranks are gone)"


def test_a_non_loopback_address_is_not_asked() -> None:
    assert ras.ras_address([{"NCCL_RAS_ADDR": "10.0.0.3:28028"}]) == (
        "NCCL_RAS_ADDR=10.0.0.3:28028 is not a loopback address: only this host's loopback is asked"
    )
    assert ras.ras_address([{}]) == ("127.0.0.1", 28028)
    assert ras.ras_address([{"NCCL_RAS_ADDR": "[::1]:29000"}]) == ("::1", 29000)


_FOREIGN_SERVER = (
    "import socket\n"
    "s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(4)\n"
    "print(s.getsockname()[1], flush=True)\n"
    "s.settimeout(60)\n"
    "try:\n c,_=s.accept(); print('asked', flush=True)\n"
    "except OSError: pass\n"
)


@pytest.mark.slow
@pytest.mark.skipif(not CAN_DROP_PRIVILEGES, reason="serving a port as another user needs root, setpriv and nobody")
def test_a_port_another_user_serves_is_never_asked() -> None:
    # Any local user can listen on the port NCCL left free and answer with ranks of its own making.
    proc = None
    for python in _interpreters():  # one that nobody may start: its standard library is all the server needs
        attempt = subprocess.Popen(
            as_nobody(python, "-I", "-c", _FOREIGN_SERVER), stdout=subprocess.PIPE, text=True, cwd="/"
        )
        assert attempt.stdout is not None
        first = attempt.stdout.readline()
        if first.strip().isdigit():
            proc, port = attempt, int(first)
            break
        attempt.wait(timeout=20)
    if proc is None:
        pytest.skip("no interpreter nobody can start")
    try:
        assert NOBODY is not None
        wait_until(lambda: NOBODY.pw_uid in (procfs.listening_uids(port) or set()), timeout=20)
        state = ras.ask_ras(_env(port), {os.geteuid()}, 5.0, version="2.28.9")
        assert state.error == f"port {port} is served by uid {NOBODY.pw_uid}, not by the run's user or root: not asked"
    finally:
        proc.kill()
        out, _ = proc.communicate(timeout=20)
    assert "asked" not in out


# ---------------------------------------------------------------------------------------------- the NCCL version
def test_the_version_from_a_log_line_and_from_the_mapped_library(tmp_path: Path) -> None:
    assert ras.nccl_version_in_text(["node-a:22:22 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"]) == "2.21.5"
    line = (JOB_MISMATCH.parent / "node-a" / "torchrun.log").read_text().splitlines()[2]
    assert ras.nccl_version_in_text([line]) == "2.28.9"
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    (site / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    (site / "nvidia_nccl_cu12-2.27.3.dist-info").mkdir()
    proc = tmp_path / "proc"
    (proc / "41").mkdir(parents=True)
    (proc / "41" / "root").symlink_to("/")
    lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    (proc / "41" / "maps").write_text(f"7f00-7f10 r-xp 00000000 08:01 123  {lib}\n")
    assert ras.nccl_version_from_maps(41, str(proc)) == "2.27.3"  # pip's wheel: its version is the wheel's
    (proc / "42").mkdir()
    (proc / "42" / "maps").write_text("7f00-7f10 r-xp 00000000 08:01 9 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9\n")
    assert ras.nccl_version_from_maps(42, str(proc)) == "2.28.9"
    assert ras.versions([41, 42], [], str(proc)) is None  # ranks that disagree: not known
    assert ras.versions([42], [], str(proc)) == "2.28.9"


# ------------------------------------------------------------------------------------- asked on suspicion, in a thread
def test_the_asker_asks_once_per_suspicion_and_forgets_when_it_ends(server: RasServer, tmp_path: Path) -> None:
    asker = ras.RasAsker(str(tmp_path))  # no /proc there: the version comes from the log's line
    line = ["NCCL INFO NCCL version 2.28.9+cuda13.0"]
    first = asker.poll(("hung", 1.0), _env(server.port), [], line, 2, 5.0, wait=True)
    assert first is not None and first.error is None and first.ranks[1].status == "behind"
    assert asker.poll(("hung", 1.0), _env(server.port), [], line, 2, 6.0) is first  # not asked again so soon
    assert len(server.commands) == 1
    assert asker.poll(None, {}, [], [], None, 7.0) is None


# ------------------------------------------------------------------------------------------------- the diagnosis
def _snap(state: RasState, run: str = "hung", local: tuple[int, ...] = (0,)) -> Snapshot:
    job = JobInfo("rdzv:exp-gpu", "torchrun", "127.0.0.1:29500", 0, 2, tuple(JobRank(r, 0, 0, 100 + r) for r in local))
    return Snapshot(
        host="node-a", time=200.0, profile="auto", run_dir="/srv/run", run_state=RunState(run, "x"), job=job, ras=state
    )


def test_the_diagnosis_names_the_rank_behind_on_another_node() -> None:
    state = ras.to_state(ras.parse_answer(_sections(JOB_STALL)["json"]), 150.0, 2, "2.28.9")
    (finding,) = list(collectives(_snap(state), Context()))
    assert finding.code == "collective_missing_rank" and finding.severity is Severity.CRITICAL
    assert finding.message.startswith(
        "Rank 1 has launched up to operation 10 while rank 0 reached 11 (NCCL RAS, AllReduce operations: "
        "rank 1 is process 21 on node 127.0.0.1, GPU 0); this host's rank 0 waits for it on another node"
    )
    # On the node of the rank behind, its own rank is named and nothing is said of another node.
    (own,) = list(collectives(_snap(state, local=(1,)), Context()))
    assert "another node" not in own.message


def test_nothing_is_said_from_ras_on_a_progressing_run_or_an_equal_count() -> None:
    stall = ras.to_state(ras.parse_answer(_sections(JOB_STALL)["json"]), 150.0, 2, "2.28.9")
    assert ras_issue(_snap(stall, run="progressing")) is None  # counts differ by one between launches all the time
    equal = ras.to_state(ras.parse_answer(_sections(JOB_MISMATCH)["json"]), 150.0, 2, "2.28.9")
    assert list(collectives(_snap(equal), Context())) == []
    refused = RasState(150.0, "2.27.3", "NCCL 2.27.3: a RAS query crashes jobs there (NVIDIA/nccl#1762): not asked")
    assert list(collectives(_snap(refused), Context())) == []


# ------------------------------------------------------------------------------------ the engine's job watch fills it
@pytest.fixture
def rank(server: RasServer) -> Iterator[tuple[int, float]]:
    """Rank 0 of a two-rank torchrun job whose ranks name ``server`` as their RAS service: its pid and start time."""
    env = {
        "PATH": "/usr/bin:/bin",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "exp-gpu",
        "NCCL_RAS_ADDR": f"127.0.0.1:{server.port}",
    }
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env)
    try:
        yield proc.pid, psutil.Process(proc.pid).create_time()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_the_job_watch_asks_a_hung_run_s_service_and_never_a_progressing_one(
    server: RasServer, rank: tuple[int, float], tmp_path: Path
) -> None:
    pid, created = rank
    log = tmp_path / "train.log"
    log.write_text("node-a:22:22 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\nstep 10\n")
    base = Snapshot(host="node-a", time=time.time(), profile="auto", run_dir=str(tmp_path), logs=(str(log),))
    watch = JobWatch()
    calm = replace(base, run_state=RunState("progressing", "steps"))
    watch.sample([(pid, created)], (), calm)
    assert watch.job is not None and watch.ras is None
    hung = replace(base, run_state=RunState("hung", "no step for 90 s", since=base.time - 90))

    def asked() -> RasState | None:
        watch.sample([(pid, created)], (), hung)
        return watch.ras

    state = wait_until(asked, timeout=20)
    assert state.version == "2.28.9" and [(r.rank, r.status) for r in state.ranks] == [(0, "ok"), (1, "behind")]
    assert len(server.commands) == 1 and server.commands[0][-2:] == ["SET FORMAT json", "STATUS"]
    (finding,) = list(collectives(replace(hung, job=watch.job, ras=state), Context()))
    assert "Rank 1 has launched up to operation 10 while rank 0 reached 11 (NCCL RAS" in finding.message
    watch.sample([(pid, created)], (), calm)  # the run moves again: the answer is forgotten
    assert watch.ras is None


@pytest.mark.slow
def test_the_answer_stays_while_the_run_stays_still_whatever_its_state_says(
    server: RasServer, rank: tuple[int, float], tmp_path: Path
) -> None:
    """Live on the GPU host, a hung run's state turned 'unknown' (its ranks logged NCCL's dump notices) and the job
    watch forgot RAS's answer with the suspicion: the fleet's last read found no collective numbers. The answer is
    kept, with its time, until the run moves again, and the service is not asked again for the change of words."""
    pid, created = rank
    log = tmp_path / "train.log"
    log.write_text("node-a:22:22 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\nstep 10\n")
    base = Snapshot(host="node-a", time=time.time(), profile="auto", run_dir=str(tmp_path), logs=(str(log),))
    watch = JobWatch()
    hung = replace(base, run_state=RunState("hung", "no step for 61 s", since=base.time - 61))

    def asked() -> RasState | None:
        watch.sample([(pid, created)], (), hung)
        return watch.ras

    state = wait_until(asked, timeout=20)
    unknown = replace(base, time=base.time + 4, run_state=RunState("unknown", "logs a failure", base.time - 61))
    for _ in range(3):
        watch.sample([(pid, created)], (), unknown)
        assert watch.ras is state  # the same answer, with the time it was asked
    watch.sample([(pid, created)], (), hung)
    assert watch.ras is state and len(server.commands) == 1
    watch.sample([(pid, created)], (), replace(base, run_state=RunState("progressing", "step 11")))
    assert watch.ras is None
