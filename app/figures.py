"""Plotly figures of the pages, built from the plain dictionaries the services return (no numerics here)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

TRAIN_COLOUR = "#1f77b4"
VALIDATION_COLOUR = "#ff7f0e"
REFIT_COLOUR = "#2ca02c"
MARGIN = {"l": 50, "r": 20, "t": 40, "b": 40}


def empty_figure(title: str = "", note: str = "") -> go.Figure:
    """A blank figure with an optional centred note (nothing to plot yet)."""
    figure = go.Figure()
    figure.update_layout(title=title, margin=MARGIN, xaxis={"visible": False}, yaxis={"visible": False}, height=320)
    if note:
        figure.add_annotation(text=note, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return figure


def clones_figure(summary: dict[str, Any]) -> go.Figure:
    """Bar chart of the number of clones allocated to each symbol."""
    figure = go.Figure(go.Bar(x=summary["symbols"], y=summary["clones"], marker_color=TRAIN_COLOUR))
    figure.update_layout(
        title="Clones per symbol",
        xaxis={"title": "symbol", "type": "category"},
        yaxis={"title": "clones"},
        margin=MARGIN,
        height=320,
    )
    return figure


def history_figure(
    history: list[dict[str, Any]], refit: list[dict[str, Any]] | None = None, title: str = "Training history"
) -> go.Figure:
    """Train and validation BPS per iteration (and the refit run's train BPS, when there is one)."""
    if not history and not refit:
        return empty_figure(title, "no training history")
    figure = go.Figure()
    iterations = [h["iteration"] for h in history]
    figure.add_trace(
        go.Scatter(
            x=iterations,
            y=[h["train_bps"] for h in history],
            name="train",
            mode="lines+markers",
            line_color=TRAIN_COLOUR,
        )
    )
    validation = [h.get("validation_bps") for h in history]
    if any(v is not None for v in validation):
        figure.add_trace(
            go.Scatter(
                x=iterations, y=validation, name="validation", mode="lines+markers", line_color=VALIDATION_COLOUR
            )
        )
    if refit:
        figure.add_trace(
            go.Scatter(
                x=[h["iteration"] for h in refit],
                y=[h["train_bps"] for h in refit],
                name="refit (train + validation)",
                mode="lines+markers",
                line_color=REFIT_COLOUR,
            )
        )
    figure.update_layout(
        title=title,
        xaxis=iteration_axis(max([h["iteration"] for h in [*history, *(refit or [])]], default=1)),
        yaxis={"title": "bits per symbol"},
        margin=MARGIN,
        height=320,
        legend={"orientation": "h", "y": -0.25},
    )
    return figure


RUN_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip


def runs_figure(runs: list[dict[str, Any]], labels: list[str]) -> go.Figure:
    """The session's trainings overlaid (TensorBoard-like): each run's validation BPS per iteration (its train BPS
    when it had no validation text), one colour per run, named by ``labels`` (settings and outcome)."""
    if not runs:
        return empty_figure("This session's trainings", "each training of the session appears here")
    figure = go.Figure()
    last = 1
    for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
        history = run.get("history") or []
        validation = [h.get("validation_bps") for h in history]
        which = "validation" if any(v is not None for v in validation) else "train"
        values = validation if which == "validation" else [h.get("train_bps") for h in history]
        iterations = [h["iteration"] for h in history]
        last = max([last, *iterations])
        figure.add_trace(
            go.Scatter(
                x=iterations,
                y=values,
                name=label + ("" if which == "validation" else " (train BPS)"),
                mode="lines+markers",
                line={"color": RUN_COLOURS[index % len(RUN_COLOURS)], "dash": "solid" if run.get("status") ==
                      "finished" else "dot"},
                marker={"size": 4},
            )
        )  # fmt: skip
    figure.update_layout(
        title="This session's trainings: validation BPS per iteration (dotted: cancelled or failed)",
        xaxis=iteration_axis(last),
        yaxis={"title": "bits per symbol"},
        margin=MARGIN,
        height=360,
        legend={"orientation": "h", "y": -0.3, "font": {"size": 11}},
    )
    return figure


def iteration_axis(last: int, title: str = "iteration") -> dict[str, Any]:
    """An x axis of whole iterations: ticks on integers only (a step of 1, 2, 5, 10, ... giving at most about ten
    ticks), never the "0 1 1 2 2" of rounded half steps."""
    step = 1
    for candidate in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000):
        step = candidate
        if max(int(last), 1) / candidate <= 10:
            break
    return {"title": title, "tickmode": "linear", "tick0": 0, "dtick": step, "tickformat": "d", "rangemode": "tozero"}


def duration(seconds: float) -> str:
    """A duration for people: 0.4 s, 12 s, 3 min 5 s, 2 h 10 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(round(seconds)) // 60
    if minutes < 60:
        return f"{minutes} min {int(round(seconds)) % 60} s"
    return f"{minutes // 60} h {minutes % 60} min"


def _timing(records: list[dict[str, Any]], remaining: int) -> str:
    """' · S per iteration, at most T left' from the iterations so far (their mean time, the last three)."""
    seconds = [float(r.get("seconds") or 0.0) for r in records[-3:]]
    if not seconds or sum(seconds) <= 0:
        return ""
    mean = sum(seconds) / len(seconds)
    text = f" · {duration(mean)} per iteration"
    if remaining > 0:
        text += f", at most {duration(mean * remaining)} left"
    return text


def progress_view(progress: dict[str, Any] | None) -> tuple[float, str, go.Figure]:
    """Progress bar value (0-100), its label and the live BPS chart for a job's progress file."""
    if not progress:
        return 0.0, "No training job yet.", empty_figure("Training progress", "start a training job")
    history, refit = progress.get("history") or [], progress.get("refit") or []
    planned = max(int(progress.get("max_iterations") or 1), 1)
    status = progress.get("status", "running")
    if progress.get("phase") == "refit":
        best = len(history) or 1
        value = 100.0 * min(len(refit), best) / best
        label = f"Refit on training + validation text: iteration {len(refit)} (at most {best})"
        label += _timing(refit, best - len(refit))
    else:
        value = 100.0 * min(len(history), planned) / planned
        label = f"Iteration {len(history)} of at most {planned}"
        if int(progress.get("restarts") or 1) > 1:
            label = f"Restart {int(progress.get('restart') or 0) + 1} of {int(progress['restarts'])}, " + label.lower()
        if progress.get("searching"):
            label = f"Candidate setting {int(progress.get('candidate') or 0) + 1}, " + label[0].lower() + label[1:]
        if history:
            last = history[-1]
            label += f": train {last['train_bps']:.4f} bps"
            if last.get("validation_bps") is not None:
                label += f", validation {last['validation_bps']:.4f} bps"
            label += _timing(history, planned - len(history))
        elif progress.get("message"):
            label = progress["message"]
    if status != "running":
        value = 100.0 if status == "finished" else value
        label = f"{status.capitalize()}: {progress.get('message', '')}"
    return value, label, history_figure(history, refit, title="Training progress (bits per symbol)")


def prune_figure(sweep: dict[str, Any] | None, selected: float | None = None) -> go.Figure:
    """Validation BPS against the kept share of the non-zero transitions, one point per threshold (the paper's
    Fig 3(d)), with the unpruned model's BPS as a dashed line and the point nearest ``selected`` ringed."""
    title = "Pruning: kept transitions vs bits per symbol"
    if not sweep or not sweep.get("points"):
        return empty_figure(title, "run the sweep to see the curve")
    points = sweep["points"]
    figure = go.Figure(
        go.Scatter(
            x=[p["kept_fraction"] for p in points],
            y=[p["bps"] for p in points],
            mode="lines+markers",
            name="pruned",
            line_color=VALIDATION_COLOUR,
            text=[f"threshold {p['threshold']:.0e}<br>{p['nonzeros']:,} non-zeros" for p in points],
            hovertemplate="%{text}<br>kept %{x:.2%}<br>%{y:.4f} bps<extra></extra>",
        )
    )
    if sweep.get("bps_unpruned") is not None:
        figure.add_hline(y=sweep["bps_unpruned"], line_dash="dash", line_color=TRAIN_COLOUR, annotation_text="unpruned")
    if selected is not None:
        nearest = min(points, key=lambda p: abs(p["threshold"] - selected) / selected)
        figure.add_trace(
            go.Scatter(
                x=[nearest["kept_fraction"]],
                y=[nearest["bps"]],
                mode="markers",
                name=f"threshold {nearest['threshold']:.0e}",
                marker={"size": 14, "symbol": "circle-open", "color": REFIT_COLOUR, "line": {"width": 3}},
                hoverinfo="skip",
            )
        )
    figure.update_layout(
        title=title,
        xaxis={"title": "kept share of non-zero transitions", "type": "log", "tickformat": ".1%", "dtick": "D2"},
        yaxis={"title": "bits per symbol"},
        margin=MARGIN,
        height=360,
        legend={"orientation": "h", "y": -0.3},
    )
    return figure
