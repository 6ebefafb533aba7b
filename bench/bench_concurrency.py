"""Benchmark: N sessions on the largest legal model pressing Generate, Score, Run Infomap and a module at once, against
gunicorn with the recommended settings (``app/gunicorn_conf.py``: 2 workers of 16 threads, Dash's Diskcache manager:
every score and Infomap run a job process of its own), under the server's memory budget (``CHMM_SERVER_MEMORY_MB``,
:mod:`app.memory`).

The model: a CHMM over the sample model's alphabet, clones and symbol pairs scaled so that its arrays take
``--model-mb`` (T drawn sharp, Dirichlet 0.05, so that its clone graph at 1e-3 has edges), with
``CHMM_MAX_MODEL_MEMORY_MB`` set just above it: the largest model the server accepts. Every session gets its own copy
(a file of its own, as an upload would be: no session shares another's load) and a precomputed Infomap run of it (so a
module opens at once). Then, for each N, a fresh server, N fresh sessions, and all 4N requests fired at once, each
polled to its end as the renderer does. Sampled every 0.1 s: the proportional memory (PSS, shared pages split between
the processes that share them) of gunicorn's master and every descendant (workers, job processes, sentinels), and
the bytes reserved in the budget. Reports, per N: what each request ended with (done, refused with a sentence, or an
error), whether every refusal was one sentence, whether any process was killed (an HTTP error, a job said "died", a
sentinel's kill), the peak memory above the idle server against the budget, and the peak reservation.

    python bench/bench_concurrency.py [--sessions 3 6 12] [--model-mb 300] [--budget-mb 2000] [--threshold 1e-3]
    python bench/bench_concurrency.py --loads M1.npz M2.npz ...   # a load's charge against its measured peak
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402
from support import SHORT_TEXT, callback_request, store_data  # noqa: E402

from app import ids  # noqa: E402
from bench.machine import describe_machine  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIMEOUT_S = 600.0
STALLED_S = 150.0
"""A burst still running after this long has a request that waits: every process's stacks go to the log (SIGUSR2)."""
SCORED = SHORT_TEXT[:5_000]
THRESHOLD = ["1e-3"]
"""The Infomap threshold the sessions type (``--threshold``)."""


# ------------------------------------------------------------------------------------------ the model
def make_model(path: Path, megabytes: float) -> None:
    """A model over the sample model's alphabet and symbol pairs whose T takes about ``megabytes`` (float32)."""
    from engine import api
    from engine.model.dense import random_model

    sample = api.load_model(REPOSITORY / "sample_models" / "alice-600.npz")
    pairs = np.asarray(sample.layout.block_pairs)
    clones = int(np.sqrt(megabytes * 1e6 / 4 / len(pairs)))
    model = random_model(
        list(sample.symbols),
        np.full(sample.n_symbols, clones),
        pairs,
        np.random.default_rng(0),
        codec=sample.codec,
        concentration=0.05,
        metadata={"corpus": "carroll-alice.txt", "note": "bench_concurrency: the largest legal model"},
    )
    api.save_model(model, path)


def prepare_run(model: Path, work: Path, threshold: float) -> Path:
    """A session folder holding ``model`` and an Infomap run of it (``communities.json``, made by the app's own
    service), to copy into every session of the bench."""
    environment = dict(os.environ, CHMM_DATA_DIR=str(work / "prepare"), CHMM_START_MODEL=str(model),
                       PYTHONPATH=str(REPOSITORY), CHMM_MAX_MODEL_MEMORY_MB="100000")  # fmt: skip
    code = (
        "from app import sessions\n"
        "from app.services import graphs\n"
        "folder = sessions.session_folder(sessions.new_session_id())\n"
        f"graphs.run_communities(folder, trials=1, threshold={threshold!r})\n"
        "print(folder)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------ the server
def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server(data_dir: Path, environment: dict[str, str], log: Path) -> Any:
    """gunicorn with the recommended settings over ``data_dir``; yields (its URL, its master process)."""
    port = free_port()
    env = dict(os.environ, CHMM_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1", PYTHONPATH=str(REPOSITORY),
               PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}") | environment  # fmt: skip
    env.pop("REDIS_URL", None)
    command = [str(BIN / "gunicorn"), "-c", "python:app.gunicorn_conf", "-b", f"127.0.0.1:{port}", "app.main:server"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPOSITORY, env=env, stdout=out, stderr=out, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            end = time.monotonic() + 120
            while True:
                with contextlib.suppress(Exception):
                    if urllib.request.urlopen(url + "/", timeout=5).status == 200:
                        break
                if time.monotonic() > end:
                    raise RuntimeError("gunicorn did not come up")
                time.sleep(0.5)
            yield url, process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


class Sampler(threading.Thread):
    """Samples, every 0.1 s, the PSS of a process and all its descendants, and the budget's reservations."""

    def __init__(self, root: int, data_dir: Path) -> None:
        super().__init__(daemon=True)
        import psutil

        self.process, self.data_dir = psutil.Process(root), data_dir
        self.peak = self.peak_reserved = self.processes = 0
        self.parts: dict[str, int] = {}
        self.parts_reserved: dict[str, int] = {}
        self.done = threading.Event()

    def memory(self) -> tuple[int, int]:
        """The PSS of the whole tree and how many processes it has; the parts (master and workers, jobs,
        sentinels) of the largest total so far in :attr:`parts`."""
        import psutil

        parts = {"workers": 0, "jobs": 0, "sentinels": 0}
        count = 0
        try:
            workers = self.process.children()
            tree = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            return 0, 0
        worker_pids = {self.process.pid} | {worker.pid for worker in workers}
        held = self.held_by()
        reserved = {
            "workers": sum(v for pid, v in held.items() if pid in worker_pids),
            "jobs": sum(v for pid, v in held.items() if pid not in worker_pids),
        }
        for process in tree:
            with contextlib.suppress(psutil.Error):
                pss = process.memory_full_info().pss
                if process.pid in worker_pids:
                    parts["workers"] += pss
                elif "app.jobs.sentinel" in " ".join(process.cmdline()):
                    parts["sentinels"] += pss
                else:
                    parts["jobs"] += pss
                count += 1
        total = sum(parts.values())
        if total > self.peak:
            self.parts, self.parts_reserved = parts, reserved
        return total, count

    def held_by(self) -> dict[int, int]:
        """The bytes reserved in the budget now, by the id of the process that holds them (a reservation's file is
        ``<bytes>-<pid>-<id>``)."""
        held: dict[int, int] = {}
        with contextlib.suppress(OSError):
            for path in (self.data_dir / ".memory" / "held").iterdir():
                size, pid, _ = (path.name.split("-", 2) + ["", ""])[:3]
                if size.isdigit() and pid.isdigit():
                    held[int(pid)] = held.get(int(pid), 0) + int(size)
        return held

    def reserved(self) -> int:
        held = self.data_dir / ".memory" / "held"
        with contextlib.suppress(OSError):
            return sum(int(path.name.split("-", 1)[0]) for path in held.iterdir() if path.name[0].isdigit())
        return 0

    def run(self) -> None:
        while not self.done.is_set():
            total, count = self.memory()
            self.peak = max(self.peak, total)
            self.processes = max(self.processes, count)
            self.peak_reserved = max(self.peak_reserved, self.reserved())
            time.sleep(0.1)


# ------------------------------------------------------------------------------------------ the sessions
class Client:
    """One browser session, speaking the renderer's protocol (page HTML, callback POSTs, background polls)."""

    def __init__(self, url: str, dependencies: list[dict[str, Any]]) -> None:
        self.url, self.dependencies = url, dependencies
        layout = json.loads(self.request("/_dash-layout"))
        self.session = store_data(layout, ids.SESSION)
        self.values: dict[str, Any] = {
            f"{ids.SESSION}.data": self.session,
            f"{ids.SAMPLE_LENGTH}.value": 300,
            f"{ids.SAMPLE_SEED}.value": 0,
            f"{ids.SAMPLE_PREFIX}.value": "",
            f"{ids.SAMPLE_MARK_RARE}.value": ["on"],
            f"{ids.SCORE_TEXT}.value": SCORED,
            f"{ids.SCORE_PLACEHOLDER_MODE}.value": [],
            f"{ids.COMMUNITIES_TRIALS}.value": 1,
            f"{ids.COMMUNITIES_TWO_LEVEL}.value": [],
            f"{ids.COMMUNITIES_SEED}.value": 0,
            f"{ids.COMMUNITIES_THRESHOLD}.value": THRESHOLD[0],
            f"{ids.COMMUNITIES_MARKOV_TIME}.value": 1,
            f"{ids.COMMUNITIES_SELECTED}.data": "1",
            f"{ids.COMMUNITIES_RUN_SHOWN}.value": "current",
        }

    def request(self, path: str, body: dict[str, Any] | None = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 (our own server)
            return response.read()

    def fire(self, writes: str, changed: str, background: bool = False) -> Any:
        """The callback that writes ``writes`` when ``changed`` (a click) changes; a background one polled to its end.
        Returns the answer's ``response``."""
        values = self.values | {changed: 1}
        body = callback_request(self.dependencies, writes, changed, values)
        answer = json.loads(self.request("/_dash-update-component", body) or b"{}")
        if not background:
            return answer.get("response") or {}
        query = urllib.parse.urlencode({"cacheKey": answer["cacheKey"], "job": answer["job"]})
        end = time.monotonic() + TIMEOUT_S
        while time.monotonic() < end:
            time.sleep(0.5)
            answer = self.request(f"/_dash-update-component?{query}", body)
            if not answer:  # HTTP 204: the job ended without an answer (its process died, or its result was lost)
                raise RuntimeError("the job ended without an answer")
            polled = json.loads(answer)
            if polled.get("response"):
                return polled["response"]
        raise TimeoutError(f"{writes}: no answer in {TIMEOUT_S:.0f} s")


def texts(node: Any, errors_only: bool = False, inside: bool = False) -> list[str]:
    """The strings of a Dash component tree (with ``errors_only``, those inside an error message box)."""
    found: list[str] = []
    if isinstance(node, str):
        return [node] if inside or not errors_only else []
    if isinstance(node, list):
        for item in node:
            found += texts(item, errors_only, inside)
        return found
    if isinstance(node, dict):
        props = node.get("props", node)
        here = inside or "message-error" in str(props.get("className", ""))
        found += texts(props.get("children"), errors_only, here)
    return found


ACTIONS = {
    "Generate": (ids.SAMPLE_OUTPUT, f"{ids.SAMPLE_BUTTON}.n_clicks", False),
    "Score": (ids.SCORE_OUTPUT, f"{ids.SCORE_BUTTON}.n_clicks", True),
    "Infomap": (ids.COMMUNITIES_MESSAGE, f"{ids.COMMUNITIES_RUN}.n_clicks", True),
    "module": (ids.COMMUNITIES_DETAIL, f"{ids.COMMUNITIES_SELECTED}.data", False),
}
_STARTED = threading.Event()
_STARTED.set()
BUSY = re.compile(r"^The server is busy: .* try again in a moment\.$")


@dataclass
class Outcomes:
    done: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def press(client: Client, action: str, outcomes: Outcomes, start: threading.Event) -> None:
    writes, changed, background = ACTIONS[action]
    start.wait()
    began = time.perf_counter()
    try:
        response = client.fire(writes, changed, background)
        shown = response.get(writes, {})
        errors = [text.strip() for text in texts(shown, errors_only=True) if text.strip()]
    except Exception as exc:  # an HTTP error (a killed worker answers 502/500), a time-out
        with outcomes.lock:
            outcomes.errors.append(f"{action}: {type(exc).__name__}: {exc}"[:200])
        return
    with outcomes.lock:
        outcomes.seconds.append(time.perf_counter() - began)
        if not errors:
            outcomes.done[action] = outcomes.done.get(action, 0) + 1
        elif all(BUSY.match(error) for error in errors):
            outcomes.refused[action] = outcomes.refused.get(action, 0) + 1
            outcomes.sentences += errors
        else:
            outcomes.errors.append(f"{action}: {' | '.join(errors)}"[:300])


def one_sentence(text: str) -> bool:
    return text.endswith(".") and ". " not in text and "\n" not in text


def died(data_dir: Path) -> list[str]:
    """The job records and notices that say a process died or was killed."""
    said = []
    for path in list(data_dir.glob("*/communities-job.json")) + list(data_dir.glob("*/notice.json")):
        text = path.read_text(errors="replace")
        if any(word in text for word in ("died", "killed", "needed more than")):
            said.append(f"{path.parent.name[:8]}/{path.name}: {text[:160]}")
    return said


def round_of(
    sessions: int, model: Path, run: Path, work: Path, environment: dict[str, str], own: bool = True
) -> dict[str, Any]:
    """One burst of ``sessions`` sessions on a fresh server, each on a copy of the model (``own``) or on the small
    start model (the burst's cost beside any model: threads, answers, job processes)."""
    data_dir = work / f"data-{sessions}-{'own' if own else 'sample'}"
    with server(data_dir, environment, work / f"gunicorn-{sessions}-{int(own)}.log") as (url, master):
        dependencies = json.loads(urllib.request.urlopen(url + "/_dash-dependencies", timeout=60).read())
        clients = [Client(url, dependencies) for _ in range(sessions)]
        for client in clients if own else []:  # a model of its own for each session (as an upload is), and its run
            folder = data_dir / client.session.split(".")[0]
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run / "current.npz", folder / "current.npz")  # its time too: the run is of this model
            shutil.copy2(run / "communities.json", folder / "communities.json")
        warm = Client(url, dependencies)  # one session on the small start model does everything once first, so
        for action in ACTIONS:  # that "idle" holds what a worker loads once for all (imports, compiled kernels)
            press(warm, action, Outcomes(), _STARTED)
        shutil.rmtree(data_dir / warm.session.split(".")[0], ignore_errors=True)
        time.sleep(2.0)
        sampler = Sampler(master.pid, data_dir)
        idle, _ = sampler.memory()
        idle_parts, sampler.peak = dict(sampler.parts), 0
        sampler.start()
        outcomes, start = Outcomes(), threading.Event()
        threads = [
            threading.Thread(target=press, args=(client, action, outcomes, start))
            for client in clients
            for action in ACTIONS
        ]
        for thread in threads:
            thread.start()
        began = time.perf_counter()
        start.set()
        told = False
        for thread in threads:
            while thread.is_alive():
                thread.join(5.0)
                if not told and time.perf_counter() - began > STALLED_S:  # every stack into the server's log
                    told = True
                    print(f"    stalled past {STALLED_S:.0f} s: stacks of every process sent to the log", flush=True)
                    for process in sampler.process.children(recursive=True):
                        with contextlib.suppress(Exception):
                            os.kill(process.pid, signal.SIGUSR2)
        wall = time.perf_counter() - began
        time.sleep(1.0)
        sampler.done.set()
        sampler.join()
        return {
            "sessions": sessions,
            "outcomes": outcomes,
            "idle": idle,
            "peak": sampler.peak,
            "reserved": sampler.peak_reserved,
            "processes": sampler.processes,
            "wall": wall,
            "died": died(data_dir),
            "parts": {k: (v - idle_parts.get(k, 0)) / 1e6 for k, v in sampler.parts.items()},
            "parts_reserved": {k: v / 1e6 for k, v in sampler.parts_reserved.items()},
        }


def measure_loads(paths: list[Path]) -> None:
    """A load's charge (engine.api.model_load_bytes) against the resident memory it adds at its peak, each in a fresh
    process that loaded the sample model and the file once before (the code a first load brings in is no model's)."""
    code = (
        "import sys, threading, time, gc, psutil\n"
        "from engine import api\n"
        "p = psutil.Process(); api.load_model(sys.argv[1]); first = api.load_model(sys.argv[2])\n"
        "del first; gc.collect()  # the code a first load of its kind brings in is the process's, not the model's\n"
        "base = p.memory_info().rss; peak = [base]; done = threading.Event()\n"
        "def watch():\n"
        "    while not done.is_set():\n"
        "        peak[0] = max(peak[0], p.memory_info().rss); time.sleep(0.001)\n"
        "t = threading.Thread(target=watch); t.start()\n"
        "model = api.load_model(sys.argv[2]); done.set(); t.join(); gc.collect()\n"
        "print(peak[0] - base, p.memory_info().rss - base, api.model_load_bytes(sys.argv[2]))\n"
    )
    sample = REPOSITORY / "sample_models" / "alice-600.npz"
    print("| file | file MB | charge MB | peak added MB | held after MB | charge / peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in paths:
        done = subprocess.run([sys.executable, "-c", code, str(sample), str(path)], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPOSITORY)), check=True)  # fmt: skip
        peak, held, charge = (int(v) for v in done.stdout.split())
        print(f"| {path.name} | {path.stat().st_size / 1e6:,.1f} | {charge / 1e6:,.1f} | {peak / 1e6:,.1f} | "
              f"{held / 1e6:,.1f} | {charge / max(peak, 1):.2f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[3, 6, 12])
    parser.add_argument("--model-mb", type=float, default=300.0, help="the bytes of the model's T")
    parser.add_argument("--budget-mb", type=float, default=2000.0, help="CHMM_SERVER_MEMORY_MB")
    parser.add_argument("--model", type=Path, help="a model of one's own instead of the synthetic one")
    parser.add_argument("--threshold", type=float, default=1e-3, help="Infomap's pruning threshold (the page's)")
    parser.add_argument("--loads", type=Path, nargs="+", help="only measure these files' load charges")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, data)")
    args = parser.parse_args()
    print(describe_machine())
    if args.loads:
        measure_loads(args.loads)
        return
    THRESHOLD[0] = f"{args.threshold:g}"
    work = Path(tempfile.mkdtemp(prefix="chmm-concurrency-"))
    try:
        model = args.model or work / "largest.npz"
        if args.model is None:
            started = time.perf_counter()
            make_model(model, args.model_mb)
            print(f"model: {model.stat().st_size / 1e6:,.0f} MB file, made in {time.perf_counter() - started:.0f} s")
        import zipfile

        from engine import api
        from engine.model.archive import HEADER_OBJECT_FACTOR

        with zipfile.ZipFile(model) as archive:  # what the file's arrays and parsed header take (the server's bound)
            sizes = {info.filename: info.file_size for info in archive.infolist()}
        header = sizes.pop("header_json.npy")
        arrays = sum(sizes.values())
        limit_mb = (arrays * 1.02 + header * HEADER_OBJECT_FACTOR) / 1e6 + 1
        charge = api.model_load_bytes(model)
        started = time.perf_counter()
        run = prepare_run(model, work, args.threshold)
        print(f"Infomap run prepared in {time.perf_counter() - started:.0f} s")
        environment = {"CHMM_MAX_MODEL_MEMORY_MB": f"{limit_mb:.0f}", "CHMM_SERVER_MEMORY_MB": f"{args.budget_mb:g}",
                       "CHMM_MAX_MODEL_MB": f"{model.stat().st_size / 1e6 + 50:.0f}"}  # fmt: skip
        budget = args.budget_mb * 1e6
        print(f"CHMM_MAX_MODEL_MEMORY_MB={limit_mb:.0f} (the model: {arrays / 1e6:,.0f} MB of arrays, a load charged "
              f"{charge / 1e6:,.0f} MB), CHMM_SERVER_MEMORY_MB={args.budget_mb:g}; gunicorn, 2 workers, "
              "Diskcache")  # fmt: skip
        print("\n| sessions | requests | done | refused (a sentence each) | errors | killed | peak PSS above idle MB "
              "| budget MB | peak reserved MB | processes at most | wall s |")  # fmt: skip
        print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for sessions in args.sessions:
            baseline = round_of(sessions, model, run, work, environment, own=False)
            beside = (baseline["peak"] - baseline["idle"]) / 1e6
            print(f"| {sessions} | (the same burst on the small start model: peak PSS above idle {beside:,.0f} MB, "
                  f"{len(baseline['outcomes'].errors)} errors) |||||||||")  # fmt: skip
            shutil.rmtree(work / f"data-{sessions}-sample", ignore_errors=True)
            figures = round_of(sessions, model, run, work, environment)
            outcomes: Outcomes = figures["outcomes"]
            done = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.done.items())) or "none"
            refused = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.refused.items())) or "none"
            sentences = all(one_sentence(text) for text in outcomes.sentences)
            above = (figures["peak"] - figures["idle"]) / 1e6
            print(f"| {sessions} | {4 * sessions} | {done} | {refused}{'' if sentences else ' (NOT one sentence)'} "
                  f"| {len(outcomes.errors)} | {len(figures['died'])} | {above:,.0f} | {budget / 1e6:,.0f} "
                  f"| {figures['reserved'] / 1e6:,.0f} | {figures['processes']} | {figures['wall']:.0f} |",
                  flush=True)  # fmt: skip
            parts = ", ".join(f"{k} {v:,.0f}" for k, v in figures["parts"].items())
            print(f"    at the peak, above idle (MB): {parts}")
            held = ", ".join(f"{k} {v:,.0f}" for k, v in figures["parts_reserved"].items())
            print(f"    at the peak, reserved (MB): {held}")
            for error in outcomes.errors[:8]:
                print(f"    error: {error}")
            for line in figures["died"][:5]:
                print(f"    died: {line}")
            for sentence in sorted(set(outcomes.sentences))[:4]:
                print(f"    refusal: {sentence}")
            shutil.rmtree(work / f"data-{sessions}-own", ignore_errors=True)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
