"""What Ray says of a Ray-based run (verl, OpenRLHF): which actor, worker or node died, its pid and node, and why.

Three witnesses, each read safely and never raising into the engine:

- **The driver's output**: the run's own logs that carry Ray's actor prefixes and errors (``… 2>&1 | tee train.log``,
  or ``ray job submit``'s output), read from their newest part (:func:`rlwatch.logs.ray.parse_driver`); for a job
  submitted with ``ray job submit`` whose output nobody kept, Ray's own copy, ``job-driver-<id>.log``.
- **Ray's session logs** (``/tmp/ray/session_latest/logs``; the directory the raylet's command line names, or
  ``$RAY_TMPDIR``'s): ``raylet*.out`` and ``gcs_server.out`` say when a worker was dropped or killed by the memory
  monitor and when a node was marked dead; a dead actor's ``worker-<id>-<job>-<pid>.err`` holds what it printed
  last. ``raylet*.out`` and the dead actors' ``.err`` files are followed as logs of the run (the engine asks
  :meth:`RaySource.follow`), but their endings are Ray's, not the run's: the health model does not read them.
- **Ray's State API** on the head node while the cluster lives (``/api/v0/actors?detail=1`` on the dashboard,
  asked directly over HTTP: Ray is not a dependency): every node's actors and how each died, which is how a
  multi-node run is covered without an agent on every node. Ray 2.60 turns token authentication on by default: the
  token is taken where Ray's own client takes it (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``,
  ``~/.ray/auth_token``) and sent as ``Authorization: Bearer`` to this host's dashboard only (or to one a trusted
  configuration names), never through a proxy or a redirect, and never kept, shown or written.
"""

from __future__ import annotations

import ipaddress
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlwatch.common.clock import Clock
from rlwatch.common.state import RayActor, RayFailure, RayState
from rlwatch.common.trust import open_read
from rlwatch.config.models import Config
from rlwatch.logs import ray as raylog
from rlwatch.sources import procfs

__all__ = ["Cluster", "RaySource", "auth_token", "find_cluster", "query_state_api"]

DRIVER_TAIL = 2 << 20  # the newest part of a driver's log that is parsed (its last attempt and how it ended)
HEAD_BYTES = 64 << 10
CLUSTER_LOG_TAIL = 2 << 20  # raylet*.out, gcs_server.out
ERR_TAIL = 64 << 10  # a dead actor's worker-*.err
MAX_RESPONSE = 16 << 20
RESCAN_S = 30.0  # how often the process table is read again for a Ray cluster
REPARSE_S = 5.0  # a driver log that keeps growing is parsed again at most this often
DEFAULT_DASHBOARD_PORT = 8265
TOKEN_ENV = "RAY_AUTH_TOKEN"  # noqa: S105 - the name of the variable, not a token
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"  # noqa: S105
MAX_TOKEN_BYTES = 4096
CLUSTER_LOG = re.compile(r"^(raylet(\.\d+)?\.(out|err)|gcs_server\.(out|err))$")
_JOB_ENTRYPOINT = re.compile(r"Running entrypoint for job (\S+): (.*)")
# Ray's own actors and their titles are no part of a run.
_INTERNAL = ("JobSupervisor", "DashboardAgent", "RuntimeEnvAgent")
# Death reasons that are a failure (not a normal end: OUT_OF_SCOPE, REF_DELETED; not an echo: OWNER_DIED).
_FAILED_REASONS = ("WORKER_DIED", "OOM", "NODE_DIED", "CREATION_TASK_FAILED", "RAY_KILL", "RUNTIME_ENV_FAILED")


def _option(argv: Sequence[str], *names: str) -> str | None:
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1 :]
    return value


@dataclass(frozen=True)
class Cluster:
    """A Ray cluster's processes on this host, as their command lines describe it."""

    running: bool = False
    log_dirs: tuple[str, ...] = ()  # the raylets' and GCS's --log_dir (one per session; a second node shares it)
    dashboard: str | None = None  # http://host:port from the dashboard's or the raylet's command line
    pids: tuple[int, ...] = ()
    node_ids: tuple[str, ...] = ()  # this host's nodes (a raylet's --node_id): whose actors' pids are this host's


def find_cluster(proc_root: str = procfs.PROC) -> Cluster:
    """The Ray processes of this host: ``…/ray/core/src/ray/raylet/raylet --log_dir=… --webui=…``,
    ``…/gcs_server --log_dir=…``, ``python …/ray/dashboard/dashboard.py --host=H --port=P`` — those owned by the
    user running rlwatch or root only: another user's process named like a raylet would otherwise choose where
    rlwatch sends Ray's token and which session logs it reads."""
    dirs: list[str] = []
    dashboard = None
    pids = []
    nodes: list[str] = []
    trusted = {os.geteuid(), 0}
    for pid in procfs.list_pids(proc_root):
        argv = procfs.read_cmdline(pid, proc_root)
        if not argv:
            continue
        if procfs.owner(pid, proc_root) not in trusted:
            continue  # anyone can name a process raylet: only this user's or root's is this host's cluster
        exe = os.path.basename(argv[0])
        if exe in ("raylet", "gcs_server") and "/ray/" in argv[0]:
            pids.append(pid)
            log_dir = _option(argv, "--log_dir")
            if log_dir:
                dirs.append(log_dir)
            node_id = _option(argv, "--node_id") if exe == "raylet" else None
            if node_id:
                nodes.append(node_id)
            webui = _option(argv, "--webui")
            if webui and dashboard is None and ":" in webui:
                dashboard = f"http://{_local_host(webui.rsplit(':', 1)[0])}:{webui.rsplit(':', 1)[1]}"
        elif len(argv) > 1 and any(a.endswith("/ray/dashboard/dashboard.py") for a in argv[1:3]):
            pids.append(pid)
            host, port = _option(argv, "--host"), _option(argv, "--port")
            if port and port.isdigit():
                dashboard = f"http://{_local_host(host or '127.0.0.1')}:{port}"
    return Cluster(bool(pids), tuple(dict.fromkeys(dirs)), dashboard, tuple(pids), tuple(nodes))


def _local_host(host: str) -> str:
    """Where to reach a dashboard that listens on ``host`` from this host."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "localhost") else host  # noqa: S104 - a name, not a bind


def auth_token(env: Mapping[str, str], home: Path | None) -> str | None:
    """The token Ray's own client would send: ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names,
    else ``~/.ray/auth_token``. Read safely; None when there is none. Never logged or kept."""
    token = env.get(TOKEN_ENV, "").strip()
    if token:
        return token
    paths = [Path(p).expanduser() for p in (env.get(TOKEN_PATH_ENV),) if p]
    if home is not None:
        paths.append(home / ".ray" / "auth_token")
    for path in paths:
        try:
            with open_read(path) as fh:
                data = fh.read(MAX_TOKEN_BYTES + 1)
        except (OSError, ValueError):
            continue
        if 0 < len(data) <= MAX_TOKEN_BYTES:
            text = data.decode("utf-8", "replace").strip()
            if text:
                return text
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _foreign_listener(base: str) -> str | None:
    """Why the loopback address ``base`` must not be asked: another user's socket listens on its port (any local user
    can listen on a port Ray left free, and would get Ray's token and answer with actors of its own). None for a
    remote host, an unreadable socket table, or a port this user or root listens on."""
    parts = urllib.parse.urlsplit(base)
    try:
        port = parts.port or 80
    except ValueError:
        return None
    if not _loopback(parts.hostname or ""):
        return None
    owners = procfs.listening_uids(port)  # the network is this host's whatever proc root the processes come from
    strangers = sorted(u for u in owners or () if u not in (os.geteuid(), 0))
    if not strangers:
        return None
    return f"{base} is served by uid {strangers[0]}, not by this user or root: not asked"


def query_state_api(base: str, path: str, *, token: str | None, timeout_s: float) -> tuple[object | None, str | None]:
    """GET ``base + path`` (the dashboard's State API) → (the JSON answer, None) or (None, why not, in one line).

    No proxy, no redirect is followed (the token would go with it), the answer is bounded; never raises."""
    import http.client  # here: with ssl it is 20-40 ms of every start, and most runs have no Ray dashboard to ask

    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None, f"not an http(s) address: {parts.scheme or '?'}://…"
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn = None
    try:
        conn = conn_cls(parts.hostname, parts.port, timeout=timeout_s)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read(MAX_RESPONSE + 1)
        status = resp.status
    except TimeoutError:
        return None, f"timed out after {timeout_s:g}s"
    except ConnectionRefusedError:
        return None, "connection refused (no dashboard there)"
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        if conn is not None:
            conn.close()
    if status == 401:
        found = "no token was found" if not token else "the token was not accepted"
        return None, (
            f"HTTP 401: the cluster uses token authentication and {found} "
            f"({TOKEN_ENV}, {TOKEN_PATH_ENV} or ~/.ray/auth_token)"
        )
    if status == 403:
        return (
            None,
            "HTTP 403: the cluster refused the token (RAY_AUTH_TOKEN or ~/.ray/auth_token is another cluster's)",
        )
    if status != 200:
        return None, f"HTTP {status}"
    if len(body) > MAX_RESPONSE:
        return None, f"answer larger than {MAX_RESPONSE >> 20} MiB"
    data = raylog.load_json(body.decode("utf-8", "replace"))
    if data is None:
        return None, "the answer is not JSON"
    if isinstance(data, dict) and data.get("result") is False:
        return None, f"the State API failed: {str(data.get('msg'))[:160]}"
    return data, None


def _read_tail(path: str, size: int) -> tuple[list[str], int, tuple[int, int, int, int]] | None:
    """The newest ``size`` bytes of a file as lines (universal newlines), the number of the first of them when
    the whole file was read (else 0: unknown), and the file's identity and size; None when it cannot be read."""
    try:
        with open_read(path) as fh:
            st = os.fstat(fh.fileno())
            start = max(0, st.st_size - size)
            fh.seek(start)
            data = fh.read(size)
    except (OSError, ValueError):
        return None
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    text = data.decode("utf-8", "replace")
    return text.splitlines(), 1 if start == 0 else 0, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_head_tail(path: str) -> str:
    try:
        with open_read(path) as fh:
            head = fh.read(HEAD_BYTES)
            size = os.fstat(fh.fileno()).st_size
            tail = b""
            if size > HEAD_BYTES:
                fh.seek(max(HEAD_BYTES, size - HEAD_BYTES))
                tail = fh.read(HEAD_BYTES)
    except (OSError, ValueError):
        return ""
    return (head + b"\n" + tail).decode("utf-8", "replace")


@dataclass
class _Parsed:
    key: tuple[int, int, int, int]
    at: float  # monotonic time it was parsed
    log: raylog.DriverLog


@dataclass
class _Api:
    """The State API's last answer (or why there was none)."""

    rows: list[dict[str, object]] = field(default_factory=list)
    nodes: list[dict[str, object]] = field(default_factory=list)
    error: str | None = "not asked yet"
    at: float | None = None
    url: str | None = None


class RaySource:
    """Ray's view of the run. ``sample`` is cheap (files are re-read only when they change); ``poll_api`` does the
    network request and may take up to ``ray.timeout_s`` (twice): the engine runs it on a thread of its own."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        clock: Clock,
        *,
        proc_root: str = procfs.PROC,
        env: Mapping[str, str] | None = None,
        home: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.rc = cfg.ray
        self.run_dir = run_dir
        self.clock = clock
        self.proc_root = proc_root
        self.env = dict(os.environ if env is None else env)
        self.home = home if home is not None else _home()
        self.error: str | None = None
        self._lock = threading.Lock()
        self._is_driver: dict[tuple[int, int], tuple[bool, int]] = {}  # (dev, ino) → (a driver's?, size looked at)
        self._parsed: dict[str, _Parsed] = {}
        self._cluster_logs: dict[str, tuple[tuple[int, int, int, int], raylog.RayLogFacts]] = {}
        self._cluster = Cluster()
        self._cluster_at: float | None = None
        self._api = _Api()
        self._api_at: float | None = None
        self._follow: set[str] = set()
        self._named: dict[int, tuple[str, str | None]] = {}
        self._actors: list[RayActor] = []
        self._driver_paths: tuple[str, ...] = ()
        self._session: str | None = None
        self._active = self.rc.enabled is True or (self.rc.enabled is None and cfg.profile in ("verl", "openrlhf"))
        self._last: RayState | None = None

    # -------------------------------------------------------------------------------------------- where to look
    @property
    def enabled(self) -> bool:
        return self.rc.enabled is not False

    @property
    def active(self) -> bool:
        """The run is a Ray run: its profile says so, or one of its logs is a Ray driver's output."""
        return self._active

    def cluster(self) -> Cluster:
        now = self.clock.monotonic()
        if self._cluster_at is None or now - self._cluster_at >= RESCAN_S:
            self._cluster_at = now
            try:
                self._cluster = find_cluster(self.proc_root)
            except Exception:  # a vanished /proc entry must not take the source down
                self._cluster = Cluster()
        return self._cluster

    def session_logs(self) -> str | None:
        """Ray's session log directory for this run: configured, the running cluster's, else the latest session's
        under ``$RAY_TMPDIR`` or /tmp/ray when the run's logs name a worker it holds (a stopped cluster's logs)."""
        if self.rc.session_logs:
            p = Path(self.rc.session_logs).expanduser()
            return str(p if p.is_absolute() else self.run_dir / p)
        cluster = self.cluster()
        for d in cluster.log_dirs:
            if os.path.isdir(d):
                return d
        for tmp in (self.env.get("RAY_TMPDIR"), "/tmp/ray"):
            if not tmp:
                continue
            d = os.path.join(tmp, "session_latest", "logs")
            if os.path.isdir(d) and (cluster.running or self._holds_run_worker(d)):
                return d
        return None

    def _holds_run_worker(self, logs: str) -> bool:
        """Whether a session's logs hold a worker file of an actor the run's logs name (its pid ends the name)."""
        if not self._named:
            return False
        try:
            names = os.listdir(logs)
        except OSError:
            return False
        pids = {str(pid) for pid in self._named}
        return any(n.startswith("worker-") and n.rsplit(".", 1)[0].rsplit("-", 1)[-1] in pids for n in names)

    def is_cluster_log(self, path: str) -> bool:
        """A log of Ray itself (raylet, GCS, a worker's stderr): its ending is Ray's business, not the run's."""
        name = os.path.basename(path)
        if CLUSTER_LOG.match(name) or (name.startswith("worker-") and name.endswith((".err", ".out"))):
            return self._session is not None and os.path.dirname(path) == self._session.rstrip("/")
        return False

    def follow(self) -> tuple[str, ...]:
        """Files to follow as logs of the run: the session's raylet logs, the dead actors' stderr, and Ray's copy of
        the driver's output when the run keeps none of its own."""
        with self._lock:
            return tuple(sorted(self._follow))

    def named_members(self) -> dict[int, str]:
        """Live actor processes of the run, each with the evidence: the run's driver log relays its output as
        ``(Class pid=N)``, or the State API lists it in the run's job on this host's node; and its process title is
        ``ray::Class…`` (a pid taken again by another process is no evidence)."""
        out: dict[int, str] = {}
        where = os.path.basename(self._driver_paths[0]) if self._driver_paths else "the driver's log"
        for pid, (cls, _ip) in list(self._named.items()):
            if _titled(pid, cls, self.proc_root):
                out[pid] = f"a Ray actor of the run: {where} relays its output as ({cls} pid={pid})"
        local = set(self._cluster.node_ids)
        for actor in self._actors:
            apid = actor.pid or 0
            mine = apid > 0 and apid not in out and actor.state == "ALIVE" and actor.node_id in local
            if mine and _titled(apid, actor.class_name, self.proc_root):
                out[apid] = (
                    f"a Ray actor of the run: the State API lists {actor.class_name} (pid {apid}) in the run's job "
                    f"{actor.job_id} on this node"
                )
        return out

    # ---------------------------------------------------------------------------------------------- the State API
    def _dashboard(self) -> tuple[str | None, bool]:
        """(the dashboard's address, whether the token may be sent there)."""
        if self.rc.dashboard and self.cfg.provenance.distrust is None:
            return self.rc.dashboard.rstrip("/"), True  # a trusted file names the host: the token may go there
        # An untrusted file names no dashboard at all: its address would receive the token, or be fetched on its
        # say-so. This user's (or root's) own Ray process names its address; the token goes only to loopback.
        cluster = self.cluster()
        if cluster.dashboard:
            return cluster.dashboard, _loopback(urllib.parse.urlsplit(cluster.dashboard).hostname or "")
        if cluster.running:
            return f"http://127.0.0.1:{DEFAULT_DASHBOARD_PORT}", True
        return None, False

    def poll_api(self, *, force: bool = False) -> None:
        """Ask the State API for the actors and nodes, at most every ``ray.interval_s`` (``force``: now)."""
        if not (self.enabled and self._active and self.rc.state_api):
            return
        now = self.clock.monotonic()
        if not force and self._api_at is not None and now - self._api_at < self.rc.interval_s:
            return
        self._api_at = now
        base, may_send = self._dashboard()
        if base is None:
            self._api = _Api(error="no Ray cluster runs on this host (no raylet, GCS or dashboard process)")
            return
        if (foreign := _foreign_listener(base)) is not None:
            self._api = _Api(error=foreign, url=base)  # another user's listener: not asked, nothing sent
            return
        token = auth_token(self.env, self.home) if may_send else None
        q = f"?limit=10000&timeout={max(1, int(self.rc.timeout_s))}&detail=1"
        data, why = query_state_api(base, "/api/v0/actors" + q, token=token, timeout_s=self.rc.timeout_s)
        del token
        if why is not None:
            self._api = _Api(error=f"{why} ({base})", url=base)
            return
        nodes_data, _ = query_state_api(
            base,
            "/api/v0/nodes" + q,
            token=auth_token(self.env, self.home) if may_send else None,
            timeout_s=self.rc.timeout_s,
        )
        self._api = _Api(
            rows=raylog.state_rows(data),
            nodes=raylog.state_rows(nodes_data),
            error=None,
            at=self.clock.time(),
            url=base,
        )

    # --------------------------------------------------------------------------------------------------- reading
    def _driver_logs(self, logs: Iterable[str]) -> list[str]:
        out = []
        for path in logs:
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            known = self._is_driver.get(key)
            # A log that was not a driver's is looked at again only when it grew while still small: Ray's first
            # lines are at its head, and a big file that never showed Ray is not one.
            again = known is not None and not known[0] and known[1] != st.st_size and known[1] < 4 * HEAD_BYTES
            if known is None or again:
                known = (raylog.looks_like_ray_driver(_read_head_tail(path)), st.st_size)
                self._is_driver[key] = known
            if known[0]:
                out.append(path)
        return out

    def _parse(self, path: str) -> raylog.DriverLog | None:
        cached = self._parsed.get(path)
        try:
            st = os.stat(path)
        except OSError:
            return cached.log if cached else None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        now = self.clock.monotonic()
        if cached is not None and (cached.key == key or now - cached.at < REPARSE_S):
            return cached.log
        read = _read_tail(path, DRIVER_TAIL)
        if read is None:
            return cached.log if cached else None
        lines, first, key = read
        log = raylog.parse_driver(path, lines, first or 1_000_000_000)
        self._parsed[path] = _Parsed(key, now, log)
        return log

    def _facts(self, logs_dir: str) -> raylog.RayLogFacts:
        facts = raylog.RayLogFacts()
        try:
            names = sorted(n for n in os.listdir(logs_dir) if CLUSTER_LOG.match(n) and n.endswith(".out"))
        except OSError:
            return facts
        now = self.clock.time()
        for name in names:
            path = os.path.join(logs_dir, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            cached = self._cluster_logs.get(path)
            if cached is None or cached[0] != key:
                read = _read_tail(path, CLUSTER_LOG_TAIL)
                one = raylog.parse_ray_logs(read[0], now) if read else raylog.RayLogFacts()
                cached = (key, one)
                self._cluster_logs[path] = cached
            part = cached[1]
            facts.worker_ids.update(part.worker_ids)
            facts.disconnected.update(part.disconnected)
            facts.kills.extend(part.kills)
            facts.exits.update(part.exits)
            facts.dead_nodes.extend(part.dead_nodes)
        return facts

    def _job_driver_logs(self, logs_dir: str) -> list[str]:
        """Ray's copies of job drivers' output (``ray job submit``) whose entrypoint names the run directory."""
        out: list[str] = []
        try:
            names = [n for n in os.listdir(logs_dir) if n.startswith("job-driver-") and n.endswith(".log")]
        except OSError:
            return out
        for name in sorted(names):
            path = os.path.join(logs_dir, name)
            head = _read_head_tail(path)[:HEAD_BYTES]
            m = _JOB_ENTRYPOINT.search(head)
            if m is not None and str(self.run_dir) in m.group(2):
                out.append(path)
        return out

    def sample(self, logs: Sequence[str]) -> RayState | None:
        """Ray's view now; None when the run shows nothing of Ray (then nothing else is read)."""
        if not self.enabled:
            return None
        try:
            return self._sample(logs)
        except Exception as exc:  # a source never raises into the engine
            self.error = f"{type(exc).__name__}: {exc}"
            return self._last

    def _sample(self, logs: Sequence[str]) -> RayState | None:
        drivers = self._driver_logs(logs)
        if drivers:
            self._active = True
        if not self._active:
            return None  # not a Ray run: nothing more is read, no process table scanned
        session = self.session_logs()
        self._session = session.rstrip("/") if session else None
        drivers = [p for p in drivers if self._session is None or os.path.dirname(p) != self._session]
        facts = raylog.RayLogFacts()
        follow: set[str] = set()
        if session is not None and os.path.isdir(session):
            facts = self._facts(session)
            follow.update(os.path.join(session, n) for n in _listdir(session) if re.match(r"^raylet(\.\d+)?\.out$", n))
            if not drivers:
                drivers = self._job_driver_logs(session)
                follow.update(drivers)
        parsed = [log for p in drivers if (log := self._parse(p)) is not None]
        named: dict[int, tuple[str, str | None]] = {}
        for log in parsed:
            named.update(log.named)
        self._named = named
        self._driver_paths = tuple(drivers)
        primary = _primary(parsed)
        failure, history = raylog.failures(primary) if primary is not None else (None, [])
        actors = self._run_actors(parsed, named)
        self._actors = actors
        if failure is not None:
            failure = self._enrich(failure, actors, facts, session)
        elif (from_api := self._api_failure(actors, primary)) is not None:
            failure = from_api
        history = [self._enrich(f, actors, facts, session) for f in history]
        for f in [failure, *history]:
            err = self._err_file(session, f.actor.pid if f and f.actor else None)
            if err is not None:
                follow.add(err)
        with self._lock:
            self._follow = follow
        api = self._api
        dead_nodes = raylog.nodes_from_state(api.nodes)
        if not dead_nodes:
            dead_nodes = [text for _t, text in facts.dead_nodes[-3:]]
        self.error = None
        latest = primary.latest if primary is not None else None
        state = RayState(
            session_logs=session,
            dashboard=api.url,
            api=api.error if self.rc.state_api else "not asked (ray.state_api: false)",
            actors=tuple(actors),
            failure=failure,
            history=tuple(history),
            dead_nodes=tuple(dict.fromkeys(dead_nodes)),
            driver_logs=tuple(drivers),
            last_step=latest.last_step if latest is not None else None,
        )
        self._last = state
        return state

    # ------------------------------------------------------------------------------------------ putting together
    def _run_actors(
        self, parsed: Sequence[raylog.DriverLog], named: Mapping[int, tuple[str, str | None]]
    ) -> list[RayActor]:
        """The run's actors from the State API: those of the jobs whose actors the run's logs name (by pid or actor
        id); with no log to go by, every actor but Ray's own. Without the State API: none (the failure still names
        the actor that died, from the logs)."""
        rows = raylog.actors_from_state(self._api.rows)
        rows = [a for a in rows if a.class_name not in _INTERNAL and not (a.name or "").startswith("_ray_internal")]
        ids = {a.actor_id for log in parsed for at in log.attempts for _, a, _ in at.hops if a.actor_id}
        ids |= {i for log in parsed for at in log.attempts for d in at.died if (i := d.fields.get("actor_id"))}
        jobs = {a.job_id for a in rows if a.job_id and (a.pid in named or a.actor_id in ids)}
        if jobs:
            rows = [a for a in rows if a.job_id in jobs]
        elif parsed:
            rows = []
        return sorted(rows, key=lambda a: (_job_number(a.job_id), a.state != "DEAD", a.class_name, a.name or ""))

    def _enrich(
        self, f: RayFailure, actors: Sequence[RayActor], facts: raylog.RayLogFacts, session: str | None
    ) -> RayFailure:
        """What the State API and Ray's own logs add to a failure read from the driver's output: the actor's name,
        node and death cause, when it died, and what it printed last."""
        actor = f.actor
        evidence = list(f.evidence)
        if actor is not None:
            match = next(
                (
                    a
                    for a in actors
                    if (actor.actor_id and a.actor_id == actor.actor_id) or (actor.pid and a.pid == actor.pid)
                ),
                None,
            )
            if match is not None:
                actor = replace(
                    actor,
                    class_name=actor.class_name if actor.class_name != "an actor" else match.class_name,
                    pid=actor.pid or match.pid,
                    name=actor.name or match.name,
                    actor_id=actor.actor_id or match.actor_id,
                    node_ip=actor.node_ip or match.node_ip,
                    node_id=match.node_id,
                    job_id=match.job_id,
                    state=match.state or actor.state,
                    reason=actor.reason or match.reason,
                    exit_type=actor.exit_type or match.exit_type,
                    detail=actor.detail or match.detail,
                )
                if match.reason:
                    evidence.append(f"State API: {match.label} {match.state}, {match.reason}: {match.detail or ''}")
        node = f.node
        cause = f.cause
        nodes = _nodes(self._api.nodes)
        node_id = actor.node_id if actor is not None else None
        if actor is not None and node_id is not None and node_id in nodes:
            ip, state, message = nodes[node_id]
            actor = replace(actor, node_ip=actor.node_ip or ip)
            if state == "DEAD":
                said = f"node {ip or '?'} (id {node_id[:8]}…) is DEAD: {message or 'no reason given'}"
                evidence.append(f"State API: {said}")
                node = said  # the node the actor was on, as the GCS recorded its death
                if f.kind in ("node_died", "actor_unavailable") and "is DEAD" not in cause:
                    cause = f"{cause}; the actor was {actor.label}, on {said}"
        at = f.at
        pid = actor.pid if actor is not None else None
        worker = facts.worker_ids.get(pid) if pid else None
        if worker is not None and worker in facts.disconnected:
            at = facts.disconnected[worker]
        if worker is not None and worker in facts.exits:
            t, exit_type, detail = facts.exits[worker]
            at = at or t
            evidence.append(f"gcs_server.out: worker {worker[:8]}… (pid {pid}) exit_type = {exit_type}: {detail}")
            if actor is not None and actor.exit_type is None:
                actor = replace(actor, exit_type=exit_type)
        if f.kind == "memory_monitor" and facts.kills:
            t, text = facts.kills[-1]
            at = at or t
            evidence.append(f"raylet.out: {text[:240]}")
        exception = f.exception
        err = self._err_file(session, pid)
        if err is not None:
            read = _read_tail(err, ERR_TAIL)
            last = raylog.last_exception_line(read[0]) if read else None
            if last:
                evidence.append(f"{os.path.basename(err)}: {last}")
                exception = exception or last
        return replace(
            f, actor=actor, at=at, exception=exception, node=node, cause=cause, evidence=tuple(dict.fromkeys(evidence))
        )

    def _err_file(self, session: str | None, pid: int | None) -> str | None:
        if session is None or not pid:
            return None
        suffix = f"-{pid}.err"
        found = [n for n in _listdir(session) if n.startswith("worker-") and n.endswith(suffix)]
        return os.path.join(session, sorted(found)[-1]) if found else None

    def _api_failure(self, actors: Sequence[RayActor], primary: raylog.DriverLog | None) -> RayFailure | None:
        """With no failure in the driver's output (none kept, or the driver still runs): an actor of the run's
        latest job that the State API says died of a failure (not a normal end, not an echo of its owner's)."""
        if not actors:
            return None
        latest_job = max((a.job_id for a in actors if a.job_id), key=_job_number, default=None)
        dead = [
            a
            for a in actors
            if a.job_id == latest_job
            and a.state == "DEAD"
            and a.reason in _FAILED_REASONS
            and a.exit_type not in ("INTENDED_SYSTEM_EXIT", "INTENDED_USER_EXIT")  # ended on purpose by Ray or you
        ]
        if not dead:
            return None
        first = dead[0]
        meaning = raylog.exit_meaning(first.exit_type) or first.detail or first.reason or "it died"
        kind = {"OOM": "memory_monitor", "NODE_DIED": "node_died", "CREATION_TASK_FAILED": "creation_failed"}.get(
            first.reason or "", "actor_died"
        )
        others = f" (and {len(dead) - 1} more of its actors)" if len(dead) > 1 else ""
        latest = primary.latest if primary is not None else None
        return RayFailure(
            kind=kind,
            cause=f"{first.label} died{others}: {meaning}",
            title=f"State API: {first.class_name} {first.state} ({first.reason})",
            actor=first,
            step=latest.last_step if latest is not None else None,
            current=not any(a.state == "ALIVE" and a.job_id != latest_job for a in actors),
            evidence=tuple(f"State API: {a.label} DEAD, {a.reason}: {a.detail or ''}" for a in dead[:4]),
        )


def _nodes(rows: Iterable[Mapping[str, object]]) -> dict[str, tuple[str | None, str | None, str | None]]:
    """node id → (IP, state, state message) from the State API's node rows."""
    out: dict[str, tuple[str | None, str | None, str | None]] = {}
    for row in rows:
        node_id = row.get("node_id")
        if isinstance(node_id, str):
            values = [row.get(k) for k in ("node_ip", "state", "state_message")]
            ip, state, message = (v if isinstance(v, str) else None for v in values)
            out[node_id] = (ip, state, message)
    return out


def _titled(pid: int, cls: str, proc_root: str) -> bool:
    """Whether ``pid``'s process title is Ray's for an actor of class ``cls`` (``ray::Class`` or ``ray::Class.m``)."""
    argv = procfs.read_cmdline(pid, proc_root)
    title = argv[0].strip() if argv else ""
    return title == f"ray::{cls}" or title.startswith(f"ray::{cls}.")


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _home() -> Path | None:
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def _job_number(job: str | None) -> int:
    """Ray's job ids are 4 bytes, little-endian in hex ("02000000" is job 2)."""
    try:
        return int.from_bytes(bytes.fromhex(job or ""), "little")
    except ValueError:
        return -1


def _primary(parsed: Sequence[raylog.DriverLog]) -> raylog.DriverLog | None:
    """The driver log that says most about how the run ends: one whose latest attempt failed, else the one with
    the latest step, else the first."""
    if not parsed:
        return None
    failed = [log for log in parsed if log.latest is not None and log.latest.failed]
    pool = failed or list(parsed)

    def score(log: raylog.DriverLog) -> tuple[int, int, int]:
        latest = log.latest
        return (len(log.attempts), latest.last_step or -1 if latest else -1, -len(log.path))

    return max(pool, key=score)
