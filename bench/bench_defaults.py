"""The plain command on every corpus: ``chmm train CORPUS -o m.npz`` with the defaults (the recipe: online EM then
batch EM, states and pseudocount chosen on validation within the default budget, refit), its test BPS and minutes
beside our Kneser-Ney n-gram (on the same split, as ``chmm train`` reports it) and the paper's CHMM (Table 4).

    python bench/bench_defaults.py [--only carroll-alice shakespeare-macbeth] [--budget MINUTES] [--backend gpu]
        [--stages] [--checkout PATH] [--cpu-clock] [--load 0 2 4]

Each corpus runs ``python -m engine.cli train`` in a subprocess, one after another (run it alone on the machine: the
search's budget is wall-clock time). Prints one table row per corpus as it finishes, and keeps each corpus's JSON
summary (the search's candidates, the reason for the choice) in ``bench/out/defaults-CORPUS.json``. ``--stages``
also prints, per corpus, a line per candidate of the search: its stages as predicted before it ran (where the search
recorded them) and as measured, and what the search's whole-candidate prediction before issue 48, item 2, would
have said from the same record; then the refit predicted and measured. ``--checkout`` runs ``chmm train`` from
another checkout (e.g. a worktree of an earlier commit; its JSON files are named after its folder). ``--cpu-clock``
runs it on its own CPU seconds (:data:`CPU_CLOCK`), for a machine shared with other work.

``--load N [N ...]`` runs each corpus once per N, in turn (interleaved: corpus by corpus, the loads one after the
other), with N busy processes beside ``chmm train`` (:func:`busy`: each spins one core, niced not at all, and is
killed when the run ends; each also ends itself after :data:`BUSY_LIMIT_MINUTES`): the machine a user shares with a
browser, the app's other jobs or a CI box. Its table has a row per corpus and load: states, test BPS, our n-gram's,
minutes against the bound stated at the start, the load average over the run, and, for N > 0, the test BPS less the
same corpus's figure with N = 0 in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
PAPER_CHMM = {
    "blake-poems": 1.60,
    "shakespeare-macbeth": 1.69,
    "carroll-alice": 1.54,
    "shakespeare-hamlet": 1.63,
    "milton-paradise": 1.73,
    "calgary-book1": 1.63,
    "melville-moby_dick": 1.72,
    "war-and-peace": 1.59,
}
"""The paper's Table 4 (30,000-state CHMM); the other corpora are not in the paper."""
OUT = ROOT / "bench" / "out"
"""Where each corpus's JSON summary goes (its search's candidates and the reason for the choice)."""


CPU_CLOCK = (
    "import runpy, sys, time; time.perf_counter = time.process_time; sys.argv[0] = 'chmm'; "
    "runpy.run_module('engine.cli', run_name='__main__')"
)
"""``python -c`` code that runs ``chmm`` with the process's CPU seconds (all its threads) as its clock: the search's
budget and every iteration's seconds (``--cpu-clock``, for a shared machine, where wall-clock seconds follow the other
processes' load)."""


BUSY_LIMIT_MINUTES = 60.0
"""A busy process of ``--load`` ends itself after this long, should the benchmark die without killing it."""

BUSY_CODE = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    sum(range(10_000))\n"
"""What a busy process runs: pure Python arithmetic on one core until its time is up."""


class busy:
    """``with busy(n):`` n processes that each keep a core busy (:data:`BUSY_CODE`), killed on leaving."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.children: list[subprocess.Popen] = []

    def __enter__(self) -> busy:
        code = BUSY_CODE.format(seconds=60.0 * BUSY_LIMIT_MINUTES)
        self.children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.processes)]
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.kill()
        for child in self.children:
            child.wait()


def load_average() -> float:
    """The 1-minute load average (0 where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def run(
    corpus: Path, budget: float | None, backend: str | None = None, checkout: Path = ROOT, cpu_clock: bool = False
) -> dict:
    """``chmm train`` with the defaults on ``corpus`` (on ``backend`` when given), from ``checkout``, on the process's
    CPU clock with ``cpu_clock``: its JSON summary plus the wall-clock minutes."""
    with tempfile.TemporaryDirectory() as folder:
        chmm = [sys.executable, "-c", CPU_CLOCK] if cpu_clock else [sys.executable, "-m", "engine.cli"]
        command = [*chmm, "train", str(corpus), "-o", str(Path(folder) / "m.npz")]
        command += ["--json", "--quiet"] + (["--budget", str(budget)] if budget is not None else [])
        command += ["--backend", backend] if backend is not None else []
        started = time.perf_counter()
        environment = os.environ | {"PYTHONPATH": str(checkout)}
        done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=False, env=environment)
        minutes = (time.perf_counter() - started) / 60
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"minutes": minutes}


def whole_candidate_prediction(record: list[dict], cost, states: int, first_exponent: float = 1.0) -> float:
    """The search's prediction before issue 48, item 2 (``predict_candidate_seconds`` of commit 159d23b), for
    comparison: the last candidate's seconds times (cost(states) / cost(its states)) ** e, e fitted on the mean
    seconds of the two largest numbers of states tried (``first_exponent`` with one) within 0.5-1.5; ``cost`` is the
    training memory estimate."""
    import math

    last = record[-1]
    ratio = cost(states) / max(cost(int(last["states"])), 1.0)
    seconds: dict[int, list[float]] = {}
    for line in record:
        seconds.setdefault(int(line["states"]), []).append(float(line["seconds"]))
    exponent = first_exponent
    if len(seconds) >= 2:
        small, large = sorted(seconds)[-2:]
        mean = {n: sum(v) / len(v) for n, v in seconds.items()}
        grown, cost_grown = mean[large] / max(mean[small], 1e-9), cost(large) / max(cost(small), 1.0)
        if cost_grown > 1.0 and grown > 0.0:
            exponent = math.log(grown) / math.log(cost_grown)
        exponent = min(max(exponent, 0.5), 1.5)
    return float(last["seconds"]) * ratio**exponent


def stage_table(corpus: Path, row: dict) -> list[str]:
    """A line per candidate of ``row``'s search (the summary of one run): the stages predicted before it ran (online
    epochs x seconds each, batch iterations x seconds each, other seconds, in all) and measured, with the
    whole-candidate prediction of :func:`whole_candidate_prediction` from the same record; then the refit."""
    from engine import training

    options = training.TrainOptions()
    prepared = training.stages.prepare_training_corpus(corpus.read_text(encoding="utf-8"), options, corpus.stem, None)
    memory: dict[int, float] = {}

    def cost(n: int) -> float:
        if n not in memory:
            memory[n] = float(training.estimate_training_memory(prepared, options_for(options, n)))
        return memory[n]

    def stages(line: dict) -> str:
        if "online_epochs" not in line:
            return "| | | |"
        epochs, iterations = line["online_epochs"], line["batch_iterations"]
        online = f"{epochs:.1f} x {line['online_seconds'] / max(epochs, 1e-9):.1f} s" if epochs else "-"
        batch = f"{iterations:.0f} x {line['batch_seconds'] / max(iterations, 1e-9):.2f} s" if iterations else "-"
        return f"| {online} | {batch} | {line['other_seconds']:.1f} |"

    lines = [
        "| candidate | states | pseudocount | validation BPS | stopped | predicted: online | batch | other | in all "
        "| measured: online | batch | other | in all | whole-candidate prediction (before) |",
        "|---:|---:|---:|---:|---|---|---|---:|---:|---|---|---:|---:|---:|",
    ]
    search = row.get("search", [])
    for k, line in enumerate(search):
        predicted = line.get("predicted")
        guess = f"{stages(predicted)} {predicted['seconds']:.0f} " if predicted else "| | | | "
        before = f"{whole_candidate_prediction(search[:k], cost, int(line['states'])):.0f}" if k else ""
        lines.append(
            f"| {k + 1} | {line['states']:,} | {line['pseudocount']:g} | {line['validation_bps']:.4f} "
            f"| {line.get('stopped', '')} {guess} {stages(line)} {line['seconds']:.0f} | {before} |"
        )
    if "refit_seconds" in row:
        guess = row.get("refit_predicted_seconds")
        lines.append(
            f"refit: {row['refit_iterations']} iterations, {row['refit_seconds']:.0f} s measured"
            + ("" if guess is None else f", {guess:.0f} s predicted")
        )
    return lines


def options_for(options, states: int):
    """``options`` with ``states`` and the first pseudocount (what the memory estimate reads)."""
    from dataclasses import replace

    from engine import training

    return replace(options, states=states, pseudocount=training.options.FIRST_PSEUDOCOUNT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="corpus file stems (default: every .txt in CHMM_CORPORA)")
    parser.add_argument("--budget", type=float, default=None, help="the search's budget (default: the engine's)")
    parser.add_argument("--backend", help="chmm train's --backend (default: its own default)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the JSON summaries (default bench/out)")
    parser.add_argument("--stages", action="store_true", help="a line per candidate: its stages predicted, measured")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="run chmm train from this checkout")
    parser.add_argument("--cpu-clock", action="store_true", help="chmm's clock: its CPU seconds (a shared machine)")
    parser.add_argument("--load", nargs="*", type=int, help="busy processes beside each run, one run per number")
    args = parser.parse_args()
    if args.load:
        load_table(args)
        return
    corpora = sorted(CORPORA.glob("*.txt"), key=lambda p: p.stat().st_size)
    if args.only:
        corpora = [p for p in corpora if p.stem in args.only]
    print(describe_machine())
    extra = ("" if args.budget is None else f" --budget {args.budget:g}") + (
        "" if args.backend is None else f" --backend {args.backend}"
    )
    clock = ", on its CPU clock" if args.cpu_clock else ""
    print(f"command: chmm train CORPUS -o m.npz{extra} (from {args.checkout}{clock})")
    print()
    print(
        "| corpus | states | pseudocount | test BPS | our KN n-gram | CHMM - n-gram | paper CHMM | minutes | expected |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    args.out.mkdir(parents=True, exist_ok=True)
    for corpus in corpora:
        row = run(corpus, args.budget, args.backend, args.checkout.resolve(), args.cpu_clock)
        tag = "" if args.checkout.resolve() == ROOT else f"-{args.checkout.resolve().name}"
        (args.out / f"defaults-{corpus.stem}{tag}.json").write_text(json.dumps(row, indent=1))  # the search, its reason
        if "error" in row:
            print(f"| {corpus.stem} | error: {row['error']} | | | | | | | |", flush=True)
            continue
        ngram = row["ngram"]["test_bps"]
        paper = PAPER_CHMM.get(corpus.stem)
        print(
            f"| {corpus.stem} | {row['states']:,} | {row.get('pseudocount', float('nan')):g} | {row['test_bps']:.3f} "
            f"| {ngram:.3f} | {row['test_bps'] - ngram:+.3f} | {'' if paper is None else f'{paper:.2f}'} "
            f"| {row['minutes']:.1f} | {row.get('expected_minutes') or float('nan'):.1f} |",
            flush=True,
        )
        if args.stages:
            print("\n".join(["", *stage_table(corpus, row), ""]), flush=True)


def load_table(args: argparse.Namespace) -> None:
    """The ``--load`` table: each corpus once per number of busy processes, interleaved (see the module's text)."""
    corpora = sorted(CORPORA.glob("*.txt"), key=lambda p: p.stat().st_size)
    if args.only:
        corpora = [p for p in corpora if p.stem in args.only]
    print(describe_machine())
    budget = "" if args.budget is None else f" --budget {args.budget:g}"
    print(f"command: chmm train CORPUS -o m.npz{budget} --json, beside N busy processes (one core each)")
    print()
    print(
        "| corpus | busy | load avg (start-end) | states | candidates | test BPS | our KN n-gram | CHMM - n-gram "
        "| - alone | minutes | stated bound | within |"
    )
    print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    args.out.mkdir(parents=True, exist_ok=True)
    for corpus in corpora:
        alone = None
        for processes in args.load:
            before = load_average()
            with busy(processes):
                row = run(corpus, args.budget, args.backend, args.checkout.resolve(), args.cpu_clock)
                after = load_average()
            (args.out / f"defaults-{corpus.stem}-busy{processes}.json").write_text(json.dumps(row, indent=1))
            if "error" in row:
                print(f"| {corpus.stem} | {processes} | | error: {row['error']} | | | | | | | | |", flush=True)
                continue
            test, ngram = row["test_bps"], row["ngram"]["test_bps"]
            alone = test if processes == 0 else alone
            versus = "" if processes == 0 or alone is None else f"{test - alone:+.3f}"
            tried = ", ".join(
                f"{line['states']:,}{'*' if line.get('stopped') == 'budget' else ''}" for line in row.get("search", [])
            )
            bound = row.get("expected_minutes") or float("nan")
            print(
                f"| {corpus.stem} | {processes} | {before:.1f}-{after:.1f} | {row['states']:,} | {tried} | {test:.3f} "
                f"| {ngram:.3f} | {test - ngram:+.3f} | {versus} | {row['minutes']:.2f} | {bound:.2f} "
                f"| {'yes' if row['minutes'] <= bound else 'NO'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
