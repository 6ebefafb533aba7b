"""Benchmark: why online EM stalls on the toy FSM, as curves: training and validation BPS per online-EM epoch for a
seed that stays on the first-order plateau and one that leaves it, for the kinds of restart `chmm train` runs.

Every run is `learning.fit` with online EM (batches of 400, the automatic size here), no early stopping and no
tolerance, from the start and with the lambda of a restart of `chmm train --start uniform`
(engine/training.options.restart_plan: 0 uniform T and lambda 0.9, 2 uniform and 0.5, 3 aligned and 0.5, where the
curves of bench/RESULTS.md had a plain sharp start; 2 clones per symbol), on the toy FSM with
k = 3 holes (the paper's 33,750 training symbols, its last tenth held out for validation). Prints a table of the
epoch at which each run's validation BPS first comes within 0.008 of the entropy rate, and writes the curves as an
SVG chart (no plotting library needed).

    python bench/bench_plateau.py [--epochs 200] [--seeds 0 4] [--restarts 0 2] [--svg docs/plateau.svg]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import describe_machine  # noqa: E402
from engine import training  # noqa: E402
from engine.model import synthetic  # noqa: E402
from engine.training import learning  # noqa: E402

K = 3
TRAINING = 33_750
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def curves(seed: int, restart: int, epochs: int) -> tuple[list[float], list[float]]:
    """Training and validation BPS per epoch of one run: restart ``restart``'s start and lambda
    (:func:`engine.training.restart_plan`) on seed ``seed``'s text."""
    rng = np.random.default_rng(seed)
    symbols = synthetic.toy_fsm_sequence(K, TRAINING, rng)
    text = "".join("0123456789abcdefghijklmnopqrstuvwxyz"[s] for s in symbols)
    options = training.TrainOptions(
        algorithm="em",
        pseudocount=1e-6,
        states=2 * synthetic.toy_fsm_n_symbols(K),
        allocation="uniform",
        normalisation="raw",
        test_fraction=0.0,
        seed=seed,
        dtype="float64",
        start="uniform",  # the restarts of `chmm train --start uniform`: the plateau is the uniform start's
    )
    corpus = training.stages.prepare_training_corpus(text, options, "toy", None)
    start = training.stages.initial_model_for(corpus, options, restart)
    memory = training.RESTART_MEMORY if training.options.restart_plan(restart)[1] else options.memory
    config = learning.TrainingConfig(
        algorithm="online",
        iterations=epochs,
        tolerance=0.0,
        patience=10**9,
        memory=memory,
        pseudocount=options.pseudocount,
    )
    records: list[learning.IterationRecord] = []
    learning.fit(start, corpus.train_parts, corpus.validation_parts, config, records.append)
    return [r.train_bps for r in records], [r.validation_bps for r in records]


def svg(series: list[tuple[str, list[float], str]], epochs: int, low: float, high: float) -> str:
    """A line chart: BPS (``low`` to ``high``) against epoch, one polyline per (label, values, dash) of ``series``."""
    width, height, left, bottom, top, right = 860, 440, 60, 40, 20, 300
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(epoch: float) -> float:
        return left + plot_w * (epoch - 1) / max(epochs - 1, 1)

    def y(value: float) -> float:
        return top + plot_h * (high - min(max(value, low), high)) / (high - low)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="white" stroke="#888"/>',
    ]
    for tick in np.linspace(low, high, 6):
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.3f}</text>')
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>')
    for tick in np.linspace(1, epochs, 5):
        parts.append(f'<text x="{x(tick):.1f}" y="{height - bottom + 16}" text-anchor="middle">{tick:.0f}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">online EM epoch</text>')
    parts.append(
        f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" '
        'text-anchor="middle">bits per symbol</text>'
    )
    for index, (label, values, dash) in enumerate(series):
        colour = COLOURS[(index // 2) % len(COLOURS)]
        points = " ".join(f"{x(e + 1):.1f},{y(v):.1f}" for e, v in enumerate(values))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}" points="{points}"/>'
        )
        legend_y = top + 14 + 18 * index
        parts.append(
            f'<line x1="{width - right + 12}" x2="{width - right + 40}" y1="{legend_y - 4}" '
            f'y2="{legend_y - 4}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>'
        )
        parts.append(f'<text x="{width - right + 46}" y="{legend_y}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 4])
    parser.add_argument(
        "--restarts",
        type=int,
        nargs="+",
        default=[0, 2],
        help="0: uniform T, lambda 0.9; 2: uniform, 0.5; 3: aligned, 0.5",
    )
    parser.add_argument("--svg", type=Path, default=Path("docs/plateau.svg"))
    args = parser.parse_args()
    optimum = synthetic.toy_fsm_optimal_bps(K)
    print(describe_machine())
    print(f"toy FSM k = {K}: entropy rate {optimum:.3f}, first-order plateau 0.556")
    print("| seed | start | lambda | left the plateau at epoch | validation BPS at the end |")
    print("| ---: | --- | ---: | ---: | ---: |")
    series = []
    for seed in args.seeds:
        for restart in args.restarts:
            aligned, larger_steps = training.options.restart_plan(restart, "uniform")
            start, memory = (
                "aligned" if aligned else "uniform",
                training.RESTART_MEMORY if larger_steps else training.TrainOptions().memory,
            )
            train, validation = curves(seed, restart, args.epochs)
            left = next((e + 1 for e, v in enumerate(validation) if v < optimum + 0.008), None)
            print(f"| {seed} | {start} | {memory} | {left if left else '-'} | {validation[-1]:.4f} |", flush=True)
            series.append((f"seed {seed}, {start}, λ {memory}: validation", validation, ""))
            series.append((f"seed {seed}, {start}, λ {memory}: training", train, "4 3"))
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(svg(series, args.epochs, optimum - 0.01, 0.58), encoding="utf-8")
    print(f"curves: {args.svg}")


if __name__ == "__main__":
    main()
