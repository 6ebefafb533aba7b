"""Benchmark: a flood of minted sessions that each upload a small corpus, against gunicorn with the recommended
settings (``bench/bench_concurrency.py``'s server), then a newcomer and a visitor who worked half an hour before.

A visitor uploads a model of its own (the upload route, then the Model page's callback) and is made to look half an
hour idle; then ``--flood`` sessions (past ``CHMM_MAX_SESSIONS``, default 500) each load the app (which mints a
session), send a 1 kB corpus through the upload route and make it their corpus, from ``--threads`` clients at once.
Reported: the flood's pace, the sessions and disk on the server after it, how long a newcomer waits for the page and
its model badge and what the badge says, and whether the visitor's model is still its current model.

    python bench/bench_flood.py [--flood 1100] [--threads 8] [--data-uri]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402
from support import callback_request  # noqa: E402

from app import ids  # noqa: E402
from bench import bench_concurrency as burst  # noqa: E402
from bench.machine import describe_machine  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
DATA_URI = [False]
"""Whether the flood sends its corpora as data URIs in the callback (``--data-uri``: what a server before the upload
route took), not through the upload route."""


def send(client: burst.Client, kind: str, data: bytes, name: str) -> str:
    """A file through the upload route; its reference."""
    headers = {"X-CHMM-Session": client.session, "X-CHMM-File-Name": name}
    request = urllib.request.Request(f"{client.url}/upload/{kind}", data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (our own server)
        return json.loads(response.read())["reference"]


def upload_callback(client: burst.Client, writes: str, changed: str) -> dict[str, Any]:
    """The callback that writes ``writes`` when the upload ``changed`` ("id.contents") is given its reference (the
    page's values as they stand: not a click's count)."""
    body = callback_request(client.dependencies, writes, changed, client.values)
    return json.loads(client.request("/_dash-update-component", body) or b"{}").get("response") or {}


def said(response: dict[str, Any], component: str) -> str:
    return " ".join(burst.texts(response.get(component, {}))).strip()


def flooder(url: str, dependencies: list[dict[str, Any]], count: int, waits: list[float], errors: list[str]) -> None:
    for n in range(count):
        began = time.perf_counter()
        try:
            client = burst.Client(url, dependencies)  # the page's layout: a new session id
            corpus = (f"flood {n} " * 120).encode()[:1000]
            if DATA_URI[0]:  # as the page sent it before the upload route (base64 in the callback's body)
                reference = "data:text/plain;base64," + base64.b64encode(corpus).decode()
            else:
                reference = send(client, "corpus", corpus, "flood.txt")
            client.values |= {f"{ids.CORPUS_UPLOAD}.filename": "flood.txt"}
            client.values[f"{ids.CORPUS_UPLOAD}.contents"] = reference
            answer = upload_callback(client, ids.CORPUS_MESSAGE, f"{ids.CORPUS_UPLOAD}.contents")
            if not said(answer, ids.CORPUS_MESSAGE).startswith("Uploaded flood.txt"):
                errors.append(said(answer, ids.CORPUS_MESSAGE)[:200])
        except Exception as exc:  # noqa: BLE001 (every failure is counted)
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        waits.append(time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=1100)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--data-uri", action="store_true", help="corpora as data URIs in the callback")
    args = parser.parse_args()
    DATA_URI[0] = args.data_uri
    print(describe_machine())
    work = Path(tempfile.mkdtemp(prefix="chmm-flood-"))
    data_dir = work / "data"
    with burst.server(data_dir, {}, work / "gunicorn.log") as (url, _master):
        dependencies = json.loads(urllib.request.urlopen(url + "/_dash-dependencies", timeout=60).read())
        visitor = burst.Client(url, dependencies)
        model = (REPOSITORY / "sample_models" / "alice-600.npz").read_bytes()
        visitor.values[f"{ids.MODEL_UPLOAD}.contents"] = (
            "data:application/octet-stream;base64," + base64.b64encode(model).decode()
            if args.data_uri
            else send(visitor, "model", model, "mine.npz")
        )
        visitor.values[f"{ids.MODEL_UPLOAD}.filename"] = "mine.npz"
        loaded = said(upload_callback(visitor, ids.MODEL_MESSAGE, f"{ids.MODEL_UPLOAD}.contents"), ids.MODEL_MESSAGE)
        folder = data_dir / visitor.session.split(".")[0]
        before = (folder / "current.npz").stat().st_ino
        half_an_hour = time.time() - 1800
        for path in [folder, *folder.iterdir()]:
            if path.is_dir() or path.stat().st_nlink == 1:
                os.utime(path, (half_an_hour, half_an_hour))
        waits: list[float] = []
        errors: list[str] = []
        share = [args.flood // args.threads + (k < args.flood % args.threads) for k in range(args.threads)]
        threads = [threading.Thread(target=flooder, args=(url, dependencies, n, waits, errors)) for n in share]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        flood_s = time.perf_counter() - began
        began = time.perf_counter()
        urllib.request.urlopen(url + "/", timeout=60).read()
        newcomer = burst.Client(url, dependencies)
        badge = said(newcomer.fire(ids.MODEL_BADGE, f"{ids.MODEL_VERSION}.data"), ids.MODEL_BADGE)
        newcomer_s = time.perf_counter() - began
        kept = folder.is_dir() and (folder / "current.npz").stat().st_ino == before
        folders = [p for p in data_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
        disk = sum(p.stat().st_size for f in folders for p in f.rglob("*") if p.is_file() and p.stat().st_nlink == 1)
    print(f"visitor: {loaded}")
    print(
        "\n| flood sessions | threads | flood s | p95 per session s | errors | sessions on the server "
        "| their own files MB | newcomer served s | newcomer's badge | visitor (half an hour idle) keeps its model |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print(
        f"| {args.flood:,} | {args.threads} | {flood_s:.0f} | {np.percentile(waits, 95):.2f} | {len(errors)} "
        f"| {len(folders):,} | {disk / 1e6:,.1f} | {newcomer_s:.2f} | {badge[:60]} | {'yes' if kept else 'NO'} |"
    )
    for error in errors[:5]:
        print(f"    error: {error}")


if __name__ == "__main__":
    main()
