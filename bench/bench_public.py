"""Benchmark: a public server pressed by N sessions at once with what used to run or read heavily inside a web request,
beside Generate and module clicks and a bystander, against gunicorn with the recommended settings (the helpers of
``bench/bench_concurrency.py``: its server, sessions, memory sampler and model).

Each of N sessions holds a copy of the largest legal model (``--model-mb``) with an Infomap run at 1e-3, and at once:
exports GEXF at a threshold with no run (``--export-threshold``: Infomap runs for the export, in a job), opens its
Module card, presses Generate, posts a callback body of the largest allowed size (``CHMM_MAX_CALLBACK_MB``) and one
just over it, and uploads a model file of the largest allowed size (``CHMM_MAX_MODEL_MB``) through the upload route;
N more sessions, on a model of ``--symbols`` symbols (one clone each, a file of about 1 MB), open the whole graph.
A bystander session meanwhile loads the page and its model badge every 0.25 s. Reported per N: what each request
ended with (done, told in one sentence within its bound, or an error), the peak memory of gunicorn's tree above idle
against the budget, and the bystander's p50 and p95.

    python bench/bench_public.py [--sessions 3 6 12] [--model-mb 100] [--budget-mb 2000] [--symbols 300000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402
from support import callback_request  # noqa: E402

from app import ids  # noqa: E402
from bench import bench_concurrency as burst  # noqa: E402
from bench.machine import describe_machine  # noqa: E402

MESSAGE_LIMIT = 600
"""The longest sentence a page may be told (:data:`engine.errors.MAX_MESSAGE_CHARACTERS`)."""


def wide_model(path: Path, symbols: int) -> None:
    """A model of ``symbols`` symbols, one clone each, every symbol followed by the next (the 1.2 MB file that made
    the whole graph run 177 s in a web worker)."""
    from engine import api
    from engine.model.dense import random_model

    names = [f"w{k}" for k in range(symbols)]
    pairs = np.stack([np.arange(symbols), (np.arange(symbols) + 1) % symbols], axis=1)
    model = random_model(names, np.ones(symbols, dtype=np.int64), pairs, np.random.default_rng(0))
    api.save_model(model, path)


@dataclass
class Tally:
    done: dict[str, int] = field(default_factory=dict)
    told: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    sentences: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, action: str, said: list[str] | None, error: str | None = None) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(f"{action}: {error}"[:300])
            elif not said:
                self.done[action] = self.done.get(action, 0) + 1
            elif all(len(s) <= MESSAGE_LIMIT and burst.one_sentence(s) for s in said):
                self.told[action] = self.told.get(action, 0) + 1
                self.sentences.update(s[:160] for s in said)
            else:
                self.errors.append(f"{action}: {' | '.join(said)}"[:300])


def post(url: str, path: str, data: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=burst.TIMEOUT_S) as response:  # noqa: S310 (our own server)
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def headers_only(url: str, path: str, length: int) -> int:
    """The status the server answers to a POST that announces ``length`` bytes and sends none of them."""
    import http.client

    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.putrequest("POST", path)
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(length))
    connection.endheaders()
    status = connection.getresponse().status
    connection.close()
    return status


def act(client: burst.Client, action: str, tally: Tally, start: threading.Event, sizes: dict[str, int]) -> None:
    """One request of a session, its outcome added to ``tally``."""
    start.wait()
    try:
        if action in ("Generate", "module", "Export", "whole graph"):
            writes, changed, background, shown = {
                "Generate": (ids.SAMPLE_OUTPUT, f"{ids.SAMPLE_BUTTON}.n_clicks", False, ids.SAMPLE_OUTPUT),
                "module": (ids.COMMUNITIES_DETAIL, f"{ids.COMMUNITIES_SELECTED}.data", False, ids.COMMUNITIES_DETAIL),
                "Export": (ids.EXPORT_DOWNLOAD, f"{ids.EXPORT_BUTTON}.n_clicks", True, ids.EXPORT_MESSAGE),
                "whole graph": (ids.COMMUNITIES_WHOLE_DATA, f"{ids.COMMUNITIES_WHOLE_SHOW}.n_clicks", False,
                                ids.COMMUNITIES_WHOLE_NOTE),
            }[action]  # fmt: skip
            response = client.fire(writes, changed, background)
            said = [t.strip() for t in burst.texts(response.get(shown, {}), errors_only=True) if t.strip()]
            tally.add(action, said)
        elif action == "largest body":  # a valid callback, padded to the cap: read, answered, forgotten
            body = callback_request(client.dependencies, ids.MODEL_BADGE, f"{ids.MODEL_VERSION}.data", client.values)
            data = json.dumps(body).encode()
            body["padding"] = "x" * (sizes["callback"] - len(data) - 20)
            try:
                status, answer = post(client.url, "/_dash-update-component", json.dumps(body).encode(),
                                      {"Content-Type": "application/json"})  # fmt: skip
            except urllib.error.URLError as exc:  # refused unread (no room in the budget) while it was being sent
                status, answer = (503, b"") if "Broken pipe" in str(exc) else (0, str(exc).encode())
            if status == 503:
                tally.add(action, ["Refused unread, the budget full (HTTP 503)."])
            else:
                tally.add(action, None, None if status == 200 else f"HTTP {status}")
        elif action == "body over the cap":  # the headers alone: the server answers before the body is sent
            status = headers_only(client.url, "/_dash-update-component", sizes["callback"] + 1)
            tally.add(action, ["Refused unread (HTTP 413)."] if status == 413 else None,
                      None if status == 413 else f"HTTP {status}")  # fmt: skip
        elif action == "upload":
            status, answer = post(client.url, "/upload/model", os.urandom(sizes["upload"]),
                                  {"X-CHMM-Session": client.session, "X-CHMM-File-Name": "largest.npz"})  # fmt: skip
            said = json.loads(answer or b"{}")
            if status == 200 and said.get("reference"):
                tally.add(action, None)
            else:
                tally.add(action, [said["message"]] if said.get("message") else None, f"HTTP {status}")
    except Exception as exc:  # an HTTP error (a killed worker answers 502/500), a time-out
        tally.add(action, None, f"{type(exc).__name__}: {exc}")


def bystander(url: str, dependencies: list[dict[str, Any]], stop: threading.Event, waits: list[float]) -> None:
    """A visitor who loads the page and its model badge every 0.25 s; each wait recorded."""
    client = burst.Client(url, dependencies)
    while not stop.is_set():
        began = time.perf_counter()
        try:
            urllib.request.urlopen(url + "/", timeout=60).read()
            client.fire(ids.MODEL_BADGE, f"{ids.MODEL_VERSION}.data")
            waits.append(time.perf_counter() - began)
        except Exception:  # noqa: S112 (a failed load is a wait past any bound)
            waits.append(60.0)
        stop.wait(0.25)


ACTIONS = ("Export", "module", "Generate", "largest body", "body over the cap", "upload", "whole graph")


def round_of(n: int, run: Path, wide: Path, work: Path, environment: dict[str, str],
             sizes: dict[str, int], threshold: str, actions: tuple[str, ...] = ACTIONS) -> dict[str, Any]:  # fmt: skip
    data_dir = work / f"data-{n}"
    with burst.server(data_dir, environment, work / f"gunicorn-{n}.log") as (url, master):
        dependencies = json.loads(urllib.request.urlopen(url + "/_dash-dependencies", timeout=60).read())
        deep = [burst.Client(url, dependencies) for _ in range(n)]
        broad = [burst.Client(url, dependencies) for _ in range(n)]
        for client in deep + broad:
            folder = data_dir / client.session.split(".")[0]
            folder.mkdir(parents=True, exist_ok=True)
            client.values |= {f"{ids.EXPORT_FORMAT}.value": "gexf", f"{ids.EXPORT_THRESHOLD}.value": threshold,
                              f"{ids.COMMUNITIES_WHOLE_EDGES}.value": 2000}  # fmt: skip
            if client in deep:
                shutil.copy2(run / "current.npz", folder / "current.npz")
                shutil.copy2(run / "communities.json", folder / "communities.json")
            else:
                shutil.copy2(wide, folder / "current.npz")
        time.sleep(2.0)
        sampler = burst.Sampler(master.pid, data_dir)
        idle, _ = sampler.memory()
        idle_parts, sampler.peak = dict(sampler.parts), 0
        sampler.start()
        tally, start, stop, waits = Tally(), threading.Event(), threading.Event(), []
        threads = [threading.Thread(target=act, args=(c, a, tally, start, sizes)) for c in deep for a in actions
                   if a != "whole graph"]  # fmt: skip
        if "whole graph" in actions:
            threads += [threading.Thread(target=act, args=(c, "whole graph", tally, start, sizes)) for c in broad]
        watcher = threading.Thread(target=bystander, args=(url, dependencies, stop, waits))
        watcher.start()
        time.sleep(1.0)
        for thread in threads:
            thread.start()
        began = time.perf_counter()
        start.set()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - began
        stop.set()
        watcher.join()
        sampler.done.set()
        sampler.join()
        parts = {k: (v - idle_parts.get(k, 0)) / 1e6 for k, v in sampler.parts.items()}
        held = {k: v / 1e6 for k, v in sampler.parts_reserved.items()}
        return {"tally": tally, "idle": idle, "peak": sampler.peak, "reserved": sampler.peak_reserved, "wall": wall,
                "parts": parts, "held": held,
                "waits": waits, "requests": len(threads), "died": burst.died(data_dir)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[3, 6, 12])
    parser.add_argument("--model-mb", type=float, default=100.0, help="the bytes of the model's T")
    parser.add_argument("--budget-mb", type=float, default=2000.0, help="CHMM_SERVER_MEMORY_MB")
    parser.add_argument("--export-threshold", default="3e-4", help="the threshold of the export (no run there)")
    parser.add_argument("--symbols", type=int, default=300_000, help="the symbols of the whole graph's model")
    parser.add_argument("--upload-mb", type=float, default=60.0, help="CHMM_MAX_MODEL_MB: each session uploads it")
    parser.add_argument("--actions", nargs="+", default=list(ACTIONS), choices=ACTIONS, help="what each session does")
    args = parser.parse_args()
    print(describe_machine())
    work = Path(tempfile.mkdtemp(prefix="chmm-public-"))
    try:
        model, wide = work / "largest.npz", work / "wide.npz"
        burst.make_model(model, args.model_mb)
        wide_model(wide, args.symbols)
        run = burst.prepare_run(model, work, 1e-3)
        from engine import api

        edges = api.graph.graph_edges(api.load_model(model), float(args.export_threshold))
        from app import config

        sizes = {"callback": config.max_callback_bytes(), "upload": int(args.upload_mb * 1e6)}
        environment = {
            "CHMM_MAX_MODEL_MEMORY_MB": f"{max(400, model.stat().st_size / 1e6 * 1.5 + 50):.0f}",
            "CHMM_SERVER_MEMORY_MB": f"{args.budget_mb:g}",
            "CHMM_MAX_MODEL_MB": f"{args.upload_mb:g}",
        }
        print(f"model: {model.stat().st_size / 1e6:,.0f} MB file; wide model: {args.symbols:,} symbols, "
              f"{wide.stat().st_size / 1e6:,.1f} MB file; budget {args.budget_mb:g} MB; export at "
              f"{args.export_threshold} (no run there: {edges:,} edges); callback cap {sizes['callback'] / 1e6:g} "
              f"MB; uploads of {args.upload_mb:g} MB")  # fmt: skip
        print("\n| sessions | requests | done | told in one sentence | errors | killed | peak PSS above idle MB "
              "| budget MB | peak reserved MB | bystander p50 / p95 s | wall s |")  # fmt: skip
        print("|---:|---:|---|---|---:|---:|---:|---:|---:|---|---:|")
        for n in args.sessions:
            figures = round_of(n, run, wide, work, environment, sizes, args.export_threshold, tuple(args.actions))
            tally: Tally = figures["tally"]
            done = ", ".join(f"{k} {v}" for k, v in sorted(tally.done.items())) or "none"
            told = ", ".join(f"{k} {v}" for k, v in sorted(tally.told.items())) or "none"
            waits = np.array(figures["waits"] or [0.0])
            print(f"| {n} | {figures['requests']} | {done} | {told} | {len(tally.errors)} | {len(figures['died'])} "
                  f"| {(figures['peak'] - figures['idle']) / 1e6:,.0f} | {args.budget_mb:,.0f} "
                  f"| {figures['reserved'] / 1e6:,.0f} | {np.percentile(waits, 50):.2f} / "
                  f"{np.percentile(waits, 95):.2f} | {figures['wall']:.0f} |", flush=True)  # fmt: skip
            above = ", ".join(f"{k} {v:,.0f}" for k, v in figures["parts"].items())
            held = ", ".join(f"{k} {v:,.0f}" for k, v in figures["held"].items())
            print(f"    at the peak, above idle (MB): {above}; reserved (MB): {held}")
            for error in tally.errors[:6]:
                print(f"    error: {error}")
            for sentence in sorted(tally.sentences)[:6]:
                print(f"    told: {sentence}")
            shutil.rmtree(work / f"data-{n}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
