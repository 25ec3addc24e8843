"""Sweeps on a Ray cluster: ``invoke run-sweep --cluster ADDRESS`` (``docs/cluster.md``).

Ray is the engine; this module only maps a sweep onto it, and it is imported (and imports Ray)
only when ``--cluster`` is given. The model:

- **One testbed per machine.** A Mininet network takes the machine's interface names, its private
  Open vSwitch and some of its sysctls, so every node offers one custom resource ``testbed``
  (``ray start --address HEAD:6379 --resources '{"testbed": 1}'``); the head may offer none and
  only coordinate.
- **One task per group.** The runs that share a network (:meth:`harness.running.ps.PsKind.groups`),
  cut into pieces of at most runs / testbeds so that every testbed has work (:func:`split`), are
  each one Ray task that needs one ``testbed``. On its node the task runs
  :func:`harness.running.engine.run_group`, the very code of a local sweep, into a scratch folder,
  and streams back (a Ray generator task, ``num_returns="streaming"``) one item per event: the
  node's provenance, each run as it starts, each run as it ends with its rows and its run folder as
  a tar, and at the end the group's network folder.
- **Rows land on the head as runs end.** The head waits on every group at once (``ray.wait``); as
  a run comes back it unpacks the run folder into the results folder, then appends the rows
  (runs.csv last), as a local sweep does. The results folder is the same in form, and the sweep
  resumes with or without a cluster.
- **A lost node costs only its running run.** When a node dies mid-group (machine down, raylet
  killed, worker crashed) the runs it finished have already come back one by one; the head
  resubmits the group's unfinished runs, which Ray places on any node with a free testbed, up to
  :data:`MAX_ATTEMPTS` attempts per group. Ray's own retry is off: it would rerun the whole
  group. Every attempt (node, runs, the ones that finished, outcome) is recorded in
  ``manifest.json`` under ``cluster``, one entry per invocation, with each node's provenance.
- **An error in a group** (the task raised: a node that is not root, at another commit, without
  Mininet) stops the sweep as it stops a local one: the other groups are cancelled (their nodes
  take their networks down), finished rows are kept, and the same command resumes.

A run counts as finished once its row is in the head's runs.csv; a row still on a node that dies
before the head fetched it is run again. The partial files of a run lost with its node stay in
that node's scratch folder (``.state/cluster/``) until the next group starts there.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import logging
import math
import os
import platform
import shutil
import signal
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from harness.running import results
from harness.running import engine
from harness.running import provenance
from harness.running.presets import PROJECT, Plan
from harness.running.provenance import git_state
from harness.running.ps import KIND
from harness.running.spec import RunSpec
from topologies.testbed import network
from topologies.testbed.ledger import ProcessRef
from topologies.testbed.network import STATE_DIR
from transports import registry
from transports.base import UserError

TESTBED = "testbed"
"""The custom resource a node offers per testbed it can run (one per machine)."""
MAX_ATTEMPTS = 3
"""Attempts per group, the first included, before its unfinished runs are given up."""
WAIT_S = 10.0
QUIET_S = 60.0           # say what the head waits for after this long without news
CANCEL_WAIT_S = 120.0    # for cancelled groups to take their networks down and say so
CONNECT_S = 5.0
MACHINE_WAIT_S = 60.0    # for a lost worker's testbed on this machine to come down
SCRATCH = STATE_DIR / "cluster"
"""Where a node's groups write before their files go to the head."""
APPENDED = (".log", ".jsonl")   # network files a later attempt appends to, as a local resume does


class ClusterError(UserError, RuntimeError):
    """The cluster cannot run this sweep: no Ray, no cluster, no testbed, or a group failed."""


def import_ray():
    """Ray, imported here and nowhere else (the unit tests put a fake in its place)."""
    try:
        import ray
    except ImportError:
        raise ClusterError("Ray is not installed: run ./setup.sh (it installs the `cluster` "
                           "extra) or `.venv/bin/pip install -e '.[cluster]'`.") from None
    return ray


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---- on a node -------------------------------------------------------------------------------

def run_group_on_node(group: list[RunSpec], sweep_name: str, plugin_files: list[str],
                      plugins_env: list[str], head_commit: str) -> Iterator[tuple]:
    """The task of one group, on the node Ray chose: run it and stream back what it produced.

    Yields ``("node", provenance)``, then per run ``("start", run_id)`` and ``("run",
    engine.Finished, tar bytes of runs/<run_id>/)``, and last ``("network", tar bytes of
    network/)``. ``plugin_files`` are the plan's transport plugins (relative to the project),
    ``plugins_env`` the head's ``$LTP_TRANSPORTS`` items (modules, or paths valid on every node).
    """
    ray = import_ray()
    info = {k: v for k, v in provenance.manifest("ps").items()
            if k not in ("command", "fingerprint")}
    info["node_id"] = ray.get_runtime_context().get_node_id()
    yield ("node", info)
    if info["git_commit"] != head_commit:
        raise ClusterError(f"node {info['host']} has commit {info['git_commit'][:12]} checked "
                           f"out and the head {head_commit[:12]}: check out the same commit on "
                           "every node (docs/cluster.md).")
    _children_use_this_code()
    _wait_for_the_machine()
    if plugin_files or plugins_env:
        registry.use_plugins([PROJECT / p for p in plugin_files] + list(plugins_env))
    scratch = _scratch()
    try:
        for event in engine.run_group(KIND, group, scratch, sweep_name):
            if isinstance(event, engine.Started):
                yield ("start", event.spec.run_id)
                continue
            rel = Path("runs") / event.spec.run_id
            data = pack(scratch, rel)
            shutil.rmtree(scratch / rel)
            yield ("run", event, data)
        yield ("network", pack(scratch, Path("network")))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _children_use_this_code() -> None:
    # The fork server and the host processes start as `python -m ...` in a folder Ray chose, and
    # the venv's editable install may name another checkout: point them at the code this task
    # itself was imported from.
    path = os.environ.get("PYTHONPATH", "")
    if path.split(os.pathsep)[0] != str(PROJECT):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), path]))


def _wait_for_the_machine() -> None:
    # A worker whose node was lost may still be taking its testbed down on this machine when
    # the group is retried here; give it a moment rather than fail (Testbed says so after that).
    deadline = time.monotonic() + MACHINE_WAIT_S
    while (owner := network.running_owner()) is not None and owner.pid != os.getpid() \
            and time.monotonic() < deadline:
        time.sleep(0.2)


def _scratch() -> Path:
    """A new scratch folder for a group, named after its worker process (PID and start time);
    those of workers that are gone (a lost node's, even one not yet reaped) are removed."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    for old in SCRATCH.iterdir():
        pid, _, rest = old.name.partition("-")
        ticks = rest.partition("-")[0]
        if pid.isdigit() and ticks.isdigit() \
                and not ProcessRef(int(pid), int(ticks)).alive():
            shutil.rmtree(old, ignore_errors=True)
    me = ProcessRef.of(os.getpid())
    return Path(tempfile.mkdtemp(prefix=f"{me.pid}-{me.start_ticks}-", dir=SCRATCH))


# ---- files between node and head ----------------------------------------------------------

def pack(base: Path, rel: Path) -> bytes:
    """``base/rel`` as a gzip'd tar whose paths start with ``rel``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(base / rel, arcname=str(rel))
    return buf.getvalue()


def _members(tar: tarfile.TarFile, top: str) -> list[tarfile.TarInfo]:
    """The members of ``tar``, each checked to be a file or folder under ``top``."""
    out = []
    for member in tar.getmembers():
        parts = PurePosixPath(member.name).parts
        if (PurePosixPath(member.name).is_absolute() or ".." in parts
                or PurePosixPath(*parts[:len(PurePosixPath(top).parts)]) != PurePosixPath(top)
                or not (member.isfile() or member.isdir())):
            raise ClusterError(f"a node sent {member.name!r} where only files under {top}/ "
                               "belong; the head refuses it.")
        out.append(member)
    return out


def unpack_run(folder: Path, run_id: str, data: bytes) -> None:
    """Put a run folder sent by a node at ``folder/runs/<run_id>`` (an interrupted attempt's
    folder there is set aside first, as a local sweep does)."""
    top = f"runs/{run_id}"
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=folder))
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = _members(tar, top)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=members, filter="data")
            else:
                tar.extractall(staging, members=members)
        dest = folder / top
        engine.set_aside(dest)
        os.replace(staging / top, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def unpack_network(folder: Path, data: bytes) -> None:
    """Merge a group's network folder into ``folder/network/``: logs append, as they do when a
    local sweep resumes on the same network; other files are replaced."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in _members(tar, "network"):
            dest = folder / member.name
            if member.isdir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "ab" if dest.suffix in APPENDED else "wb") as f:
                f.write(tar.extractfile(member).read())


# ---- on the head ------------------------------------------------------------------------------

def _check_reachable(address: str) -> None:
    # Ray waits minutes for a head that is not there; a wrong address should be one sentence now.
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--cluster takes the head's HOST:PORT (e.g. 10.0.0.1:6379) or auto, "
                           f"not {address!r}.")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S).close()
    except OSError as exc:
        raise ClusterError(f"nothing answers at {address} ({exc.strerror or exc}): is the "
                           "head started (`.venv/bin/ray start --head`, docs/cluster.md)?") from None


def connect(ray, address: str) -> list[dict]:
    """Join the cluster at ``address`` (``auto``: the one this machine belongs to); return its
    live nodes. Raises :class:`ClusterError` if it cannot, or if no node offers a testbed."""
    _check_reachable(address)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                 namespace="ltp-testbed")
    except Exception as exc:  # Ray raises ConnectionError, ValueError or RuntimeError here
        raise ClusterError(f"cannot join a Ray cluster at {address!r} ({exc}); start one as "
                           "docs/cluster.md says.") from None
    finally:
        # Ray's core installs a crash handler on SIGTERM that ends the process at once; put the
        # sweep's back (SIGTERM as Ctrl-C: cancel the groups, keep the rows).
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
    nodes = [{"node_id": n["NodeID"], "host": n.get("NodeManagerHostname"),
              "ip": n.get("NodeManagerAddress"),
              "testbeds": int(n.get("Resources", {}).get(TESTBED, 0))}
             for n in ray.nodes() if n.get("Alive")]
    if not sum(n["testbeds"] for n in nodes):
        ray.shutdown()
        raise ClusterError(f"no node of the cluster at {address!r} offers a testbed: start each "
                           "node with `.venv/bin/ray start --address HEAD:6379 --resources "
                           "'{\"testbed\": 1}'` (docs/cluster.md).")
    return nodes


def run_plan(plan: Plan, folder: Path, address: str,
             progress: Callable[[str], None] = print, figures: bool = True,
             redo: engine.Redo | None = None) -> Path:
    """Run every unfinished run of ``plan`` on the Ray cluster at ``address`` into ``folder``
    (first taking out the finished runs ``redo`` names)."""
    again = engine.redo_ids(KIND, folder, redo)
    done = results.finished_run_ids(folder) - again
    if all(s.run_id in done for s in plan.specs()):
        engine.unfinished(plan, folder, progress)   # says so
        return folder
    ray = import_ray()
    nodes = connect(ray, address)   # before writing anything: an unreachable cluster leaves no trace
    t0 = time.monotonic()
    engine.redo_runs(KIND, folder, redo, progress, again)
    try:
        todo = engine.unfinished(plan, folder, progress)
        head = Head(ray, plan, folder, address, nodes, len(todo), progress)
        head.run(split(KIND.groups(plan, todo), head.testbeds))
    finally:
        ray.shutdown()
    used = {a["node_id"] for a in head.entry["attempts"] if a["node_id"]}
    lost = sum(a["outcome"].startswith("node lost") for a in head.entry["attempts"])
    progress(f"{head.said.finished} runs on {len(used)} node(s) in "
             f"{engine.fmt_s(time.monotonic() - t0)}; {lost} group attempt(s) lost with their node")
    engine.draw(KIND, folder, progress, figures)
    if head.given_up:
        raise ClusterError(f"{len(head.given_up)} run(s) lost their node {MAX_ATTEMPTS} times and "
                           "were not run; the same command runs them (finished rows are kept).")
    progress(f"wrote {folder}")
    return folder


def split(groups: list[list[RunSpec]], testbeds: int) -> list[list[RunSpec]]:
    """``groups`` cut into pieces of at most ``ceil(runs / testbeds)`` runs, in order.

    Most presets are one network (only transport, loss and seed vary), i.e. one group: whole,
    it would keep one testbed busy and the others idle. A piece brings the network up again on
    its node, which costs seconds against tens of seconds per run.
    """
    size = max(1, math.ceil(sum(len(g) for g in groups) / max(1, testbeds)))
    return [g[i:i + size] for g in groups for i in range(0, len(g), size)]


@dataclasses.dataclass
class Attempt:
    """One submission of a group's unfinished runs, and its record in the manifest."""

    group: list[RunSpec]
    gen: object                 # the task's Ray generator
    record: dict
    host: str = "?"


class Head:
    """The head's side: submit groups, record runs as they come back, resubmit lost groups."""

    def __init__(self, ray, plan: Plan, folder: Path, address: str, nodes: list[dict],
                 total: int, progress: Callable[[str], None]) -> None:
        self.ray, self.plan, self.folder, self.say = ray, plan, folder, progress
        self.testbeds = sum(n["testbeds"] for n in nodes)
        self.said = engine.Progress(KIND, total, progress, parallel=self.testbeds)
        self.commit = git_state()[0]
        env = os.environ.get(registry.PLUGINS_ENV, "")
        self.plugins = (list(plan.plugins), [x.strip() for x in env.split(",") if x.strip()])
        self.task = ray.remote(run_group_on_node).options(
            num_cpus=0, resources={TESTBED: 1}, num_returns="streaming", max_retries=0)
        self.pending: list[Attempt] = []
        self.given_up: list[str] = []
        self.entry = {"started_at": _now(), "address": address, "head": platform.node(),
                      "ray": getattr(ray, "__version__", "unknown"), "nodes": nodes,
                      "node_provenance": {}, "attempts": [], "finished_at": None}
        self.index: int | None = None
        self.last_news = time.monotonic()

    def run(self, groups: list[list[RunSpec]]) -> None:
        """Submit every group and handle what comes back until none is left."""
        for group in groups:
            self.submit(group, 1)
        try:
            while self.pending:
                self.step()
        except BaseException:
            self.cancel_all()
            raise
        finally:
            self.entry["finished_at"] = _now()
            self.save()

    def submit(self, group: list[RunSpec], number: int) -> None:
        """Send ``group`` to the cluster as attempt ``number``."""
        gen = self.task.remote(group, self.plan.name, *self.plugins, self.commit)
        record = {"network": KIND.network_dir(group[0]), "attempt": number,
                  "runs": [s.run_id for s in group], "node_id": None, "host": None,
                  "finished": [], "outcome": "running"}
        self.entry["attempts"].append(record)
        self.pending.append(Attempt(group, gen, record))
        self.save()

    def step(self, draining: bool = False) -> None:
        """Wait for the next item of any group and handle it."""
        ready, _ = self.ray.wait([a.gen for a in self.pending], num_returns=1, timeout=WAIT_S)
        if not ready:
            self._quiet()
            return
        self.last_news = time.monotonic()
        attempt = next(a for a in self.pending if a.gen is ready[0] or a.gen == ready[0])
        errors = self.ray.exceptions
        try:
            item = self.ray.get(next(attempt.gen))
        except StopIteration:
            self._end(attempt, "done")
        except errors.RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            if draining:
                self._end(attempt, "cancelled")
                return
            self._end(attempt, f"failed: {type(cause).__name__}: {cause}")
            raise ClusterError(f"the group on {attempt.record['network']} failed on "
                               f"{attempt.host}: {cause}") from None
        except errors.RayError as exc:
            if draining:
                self._end(attempt, "cancelled")
            else:
                self._lost(attempt, exc)
        else:
            self._handle(attempt, item)

    def _handle(self, attempt: Attempt, item: tuple) -> None:
        kind, where = item[0], f" on {attempt.host}"
        if kind == "node":
            info = item[1]
            attempt.host = info["host"]
            attempt.record.update(node_id=info["node_id"], host=info["host"])
            self.entry["node_provenance"][info["node_id"]] = info
            self.save()
            self.say(f"    the group on {attempt.record['network']} ({len(attempt.group)} run(s), "
                     f"attempt {attempt.record['attempt']}) runs on {info['host']} "
                     f"(node {str(info['node_id'])[:8]})")
        elif kind == "start":
            self.said.starting(next(s for s in attempt.group if s.run_id == item[1]), where)
        elif kind == "run":
            done, data = item[1], item[2]
            unpack_run(self.folder, done.spec.run_id, data)
            engine.record(KIND, self.folder, done)
            attempt.record["finished"].append(done.spec.run_id)
            self.save()
            self.said.ended(done, where)
        elif kind == "network":
            unpack_network(self.folder, item[1])

    def _end(self, attempt: Attempt, outcome: str) -> None:
        self.pending.remove(attempt)
        attempt.record["outcome"] = outcome
        self.save()

    def _lost(self, attempt: Attempt, exc: Exception) -> None:
        """The node (or the worker) running ``attempt`` is gone: resubmit what did not finish."""
        number = attempt.record["attempt"]
        left = [s for s in attempt.group if s.run_id not in attempt.record["finished"]]
        self._end(attempt, f"node lost: {type(exc).__name__}")
        what = (f"lost node {attempt.host} ({type(exc).__name__}) during the group on "
                f"{attempt.record['network']}: {len(attempt.record['finished'])} of its "
                f"{len(attempt.group)} runs came back")
        if not left:
            self.say(f"    {what}")
        elif number < MAX_ATTEMPTS:
            self.say(f"    {what}; its {len(left)} other run(s) go to another node "
                     f"(attempt {number + 1} of {MAX_ATTEMPTS})")
            self.submit(left, number + 1)
        else:
            self.say(f"    {what}; {len(left)} given up after {MAX_ATTEMPTS} attempts")
            self.given_up += [s.run_id for s in left]

    def _quiet(self) -> None:
        if time.monotonic() - self.last_news < QUIET_S:
            return
        self.last_news = time.monotonic()
        have = self.ray.cluster_resources().get(TESTBED, 0)
        free = self.ray.available_resources().get(TESTBED, 0)
        hint = "" if have else ": no node offers a testbed now; start one (docs/cluster.md)"
        self.say(f"    waiting for {len(self.pending)} group(s); {free:g} of {have:g} testbeds "
                 f"free{hint}")

    def cancel_all(self) -> None:
        """Cancel every pending group and give the nodes time to take their networks down;
        runs that end meanwhile are still recorded."""
        for attempt in self.pending:
            try:
                self.ray.cancel(attempt.gen)
            except Exception:  # already finished or its node gone: nothing to cancel
                pass
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self.pending and time.monotonic() < deadline:
            self.step(draining=True)
        for attempt in list(self.pending):
            self._end(attempt, "abandoned (did not stop in time)")

    def save(self) -> None:
        """Write this invocation's entry into the manifest's ``cluster`` list (atomically)."""
        path = self.folder / "manifest.json"
        manifest = json.loads(path.read_text())
        entries = manifest.setdefault("cluster", [])
        if self.index is None:
            self.index = len(entries)
            entries.append(self.entry)
        else:
            entries[self.index] = self.entry
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, default=str))
        os.replace(tmp, path)
