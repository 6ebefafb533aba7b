"""Plotly figures of the pages, built from the plain dictionaries the services return (no numerics here)."""

from __future__ import annotations

import html
import time
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.jobs import RUNNING
from app.services.comparisons import DONE, PENDING, TRAINING
from app.services.learner_settings import LEARNER_COLOURS, SHORT_NAMES

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


def plain(value: Any) -> str:
    """Text from a model or a corpus as Plotly should show it: its own tags (``<a href>``, ``<b>``, ``<br>``) escaped,
    so a symbol or a name reads as written and is never a live link or markup."""
    return html.escape(str(value), quote=False)


def clones_figure(summary: dict[str, Any]) -> go.Figure:
    """Bar chart of the number of clones allocated to each symbol."""
    symbols = [plain(symbol) for symbol in summary["symbols"]]
    figure = go.Figure(go.Bar(x=symbols, y=summary["clones"], marker_color=TRAIN_COLOUR))
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
                name=plain(label) + ("" if which == "validation" else " (train BPS)"),
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
    """' · S per iteration, at most T left' from the iterations so far: their median time, which one slow iteration
    (the first one's warm-up, a burst of a neighbour on a shared machine) does not move, so the time left does not
    step back up as the mean of the last few did (10, 9, then 10 min)."""
    seconds = sorted(float(r.get("seconds") or 0.0) for r in records)
    if not seconds or seconds[-1] <= 0:
        return ""
    middle = len(seconds) // 2
    typical = seconds[middle] if len(seconds) % 2 else (seconds[middle - 1] + seconds[middle]) / 2
    text = f" · {duration(typical)} per iteration"
    if remaining > 0:
        text += f", at most {duration(typical * remaining)} left"
    return text


def _time_left(progress: dict[str, Any]) -> str:
    """' · at most T left' of a run with a bound stated at its start (``expected_seconds``: the automatic search's
    budget, a deadline, then the refit's window), from its start to its last progress; '' without one."""
    bound = progress.get("expected_seconds")
    if not bound:
        return ""
    spent = float(progress.get("updated") or 0.0) - float(progress.get("started") or 0.0)
    return f" · at most {duration(max(float(bound) - spent, 0.0))} left"


def _best_iteration(history: list[dict[str, Any]]) -> int:
    """The iterations the refit runs: the kept run's best iteration on validation (its length without validation),
    less its online EM epochs (the refit continues from the online stage's model with batch EM alone)."""
    values = [(r["validation_bps"], i) for i, r in enumerate(history) if r.get("validation_bps") is not None]
    best = (min(values)[1] + 1) if values else len(history)
    return max(best - sum(1 for r in history if r.get("online")), 1)


SELECTION_SHARE = 80.0
"""The part of the progress bar the selection stage fills when a refit follows it (the refit the rest), so the bar
never goes back when the refit starts (it fell from 95% to 17%)."""


def _selection_progress(
    progress: dict[str, Any], history: list[dict[str, Any]], planned: int
) -> tuple[float | None, str]:
    """The bar (0-100) and the label of the selection stage: over all restarts (the finished ones and this one's
    iterations); for an automatic search, None (the bar runs without a value: its work is known only at its end);
    the bar never goes back."""
    done = min(len(history), planned) / planned
    iterations = int(progress.get("iterations") or planned)
    what = f" ({iterations} online EM epochs, then {iterations} batch EM iterations)" if progress.get(
        "online_then_batch"
    ) else ""  # fmt: skip
    label = f"Iteration {len(history)} of at most {planned}{what}"
    restarts = max(int(progress.get("restarts") or 1), 1)
    if progress.get("searching"):
        # how much work the search does is not known before it ends (its candidates stop early, or are skipped),
        # only its bound: the bar runs without a value (the label says what is left of the bound); paced on the
        # budget it sat at 7% for a minute and jumped to 87% when an early search ended
        budget = float(progress.get("budget_seconds") or 0.0)
        within = f" (the choice within {budget / 60:g} min)" if budget > 0 else ""
        label = f"Candidate setting {int(progress.get('candidate') or 0) + 1}{within}, " + label[0].lower() + label[1:]
        return None, label
    finished = min(int(progress.get("finished_runs") or 0), restarts - 1)
    if restarts > 1:
        label = f"Restart {finished + 1} of {restarts}, " + label[0].lower() + label[1:]
    return 100.0 * (finished + done) / restarts, label


def running_status(progress: dict[str, Any] | None) -> str | None:
    """The status line of a running job, kept current by its progress (it said "Starting the training job." for a
    whole six-minute run): how long it has run and which stage it is in; None once it is not running."""
    if not progress or progress.get("status") != RUNNING:
        return None
    now = float(progress.get("now") or progress.get("updated") or 0.0)  # "now": handed every second while it runs
    spent = duration(max(now - float(progress.get("started") or 0.0), 0.0))
    if progress.get("phase") == "refit":
        stage = "the refit on training + validation text with the setting chosen"
    elif progress.get("searching"):
        candidate = int(progress.get("candidate") or 0) + 1
        stage = f"choosing the states and pseudocount on validation (candidate {candidate})"
    elif int(progress.get("restarts") or 1) > 1:
        stage = f"restart {int(progress.get('finished_runs') or 0) + 1} of {int(progress['restarts'])}"
    elif progress.get("phase") == "training":
        stage = "training"
    else:
        stage = str(progress.get("message") or "preparing the corpus").rstrip(".").lower()
    return f"Training for {spent}: {stage}."


def job_status(what: str, record: dict[str, Any] | None, label: str) -> str | None:
    """The status line of a running comparison or map job (it stayed on "Starting the ... job." for the whole run):
    ``what`` has run for how long, and its progress ``label``; None once it is not running."""
    if not record or record.get("status") != RUNNING or not record.get("started"):
        return None
    now = float(record.get("now") or record.get("updated") or time.time())
    spent = duration(max(now - float(record["started"]), 0.0))
    return f"{what} for {spent}" + (f": {label.rstrip('.')}." if label else ".")


def bar_value(value: float | None) -> str | None:
    """A progress bar's ``value`` property: None (no value: the bar runs without one) while the work is unknown."""
    return None if value is None else str(value)


def progress_view(progress: dict[str, Any] | None) -> tuple[float | None, str, go.Figure]:
    """Progress bar value (0-100; None during an automatic search, whose work is known only at its end), its
    label and the live BPS chart for a job's progress file."""
    if not progress:
        return 0.0, "No training job yet.", empty_figure("Training progress", "start a training job")
    history, refit = progress.get("history") or [], progress.get("refit") or []
    planned = max(int(progress.get("max_iterations") or 1), 1)
    status = progress.get("status", "running")
    if progress.get("phase") == "refit":
        best = _best_iteration(history)
        value = SELECTION_SHARE + (100.0 - SELECTION_SHARE) * min(len(refit), best) / best
        label = f"Refit on training + validation text: iteration {len(refit)} of {best} (as the kept run chose)"
        label += _timing(refit, best - len(refit)) if not progress.get("expected_seconds") else _time_left(progress)
    else:
        value, label = _selection_progress(progress, history, planned)
        if progress.get("refits") and value is not None:
            value *= SELECTION_SHARE / 100.0
        if history:
            last = history[-1]
            label += f": train {last['train_bps']:.4f} bps"
            if last.get("validation_bps") is not None:
                label += f", validation {last['validation_bps']:.4f} bps"
            if progress.get("searching"):
                label += _time_left(progress)
            else:
                restarts = max(int(progress.get("restarts") or 1), 1)
                later = restarts - int(progress.get("finished_runs") or 0) - 1  # restarts still to come after this
                label += _timing(history, planned - len(history) + max(later, 0) * planned)
        elif progress.get("message"):
            label = progress["message"]
    if status != "running":
        # a cancelled run's bar is reset, as the Cancel button resets it: whichever of the two reaches the page last
        # (its last progress or the button's answer), it shows 0 (issue 51: 0.1375 under load, when the progress came
        # second)
        value = {"finished": 100.0, "cancelled": 0.0}.get(status, value)
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


# ------------------------------------------------------------------------------------------ comparisons


def compare_progress(saved: dict[str, Any] | None) -> tuple[int, str]:
    """Percentage of learners finished (trained, failed or skipped) and the job's message."""
    if not saved:
        return 0, "No comparison yet."
    rows = saved.get("results") or []
    if saved.get("status") != RUNNING:
        return 100, str(saved.get("message") or "")
    done = sum(_fraction(row) for row in rows)
    return int(100 * done / max(len(rows), 1)), str(saved.get("message") or "")


def _fraction(row: dict[str, Any], now: float | None = None) -> float:
    """How far one learner is: 1 when it ended, its iterations for the CHMM, else its time against its estimate
    (at most 0.95 until it ends), 0 before it starts."""
    status = row.get("status")
    if status not in (PENDING, TRAINING):
        return 1.0
    if status == PENDING or not row.get("started"):
        return 0.0
    iterations = (row.get("settings") or {}).get("iterations")
    if row.get("iteration") and iterations:
        return min(0.95, row["iteration"] / (2 * iterations))  # online EM then batch EM: up to twice the iterations
    elapsed = (now or time.time()) - float(row["started"])
    return min(0.95, elapsed / max(float(row.get("estimate") or 1.0), 1.0))


def row_progress(row: dict[str, Any], now: float | None = None) -> str:
    """A learner's progress in words for the table: waiting, training (iteration, elapsed and estimate), or how
    it ended."""
    status = row.get("status", "")
    if status == PENDING:
        estimate = row.get("estimate")
        return f"waiting (about {rough_duration(estimate)})" if estimate else "waiting"
    if status == TRAINING:
        elapsed = (now or time.time()) - float(row.get("started") or now or time.time())
        text = f"training, {rough_duration(elapsed)} of about {rough_duration(float(row.get('estimate') or 0))}"
        if row.get("iteration"):
            text = f"training: iteration {row['iteration']}, {rough_duration(elapsed)}"
        return text
    return f"{status}: {row['message']}" if row.get("message") else status


def rough_duration(seconds: float) -> str:
    """A duration for people: 0.4 s, 30 s, 2 min, 1.5 h."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _rounded(value: Any, digits: int) -> Any:
    return None if value is None else round(float(value), digits)


def compare_rows(saved: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Table rows: learner, test / validation / train BPS, seconds, parameters, status (a failure's reason)."""
    rows = []
    for row in (saved or {}).get("results") or []:
        rows.append(
            {
                "learner": row.get("label") or row.get("learner"),
                "test_bps": _rounded(row.get("test_bps"), 4),
                "validation_bps": _rounded(row.get("validation_bps"), 4),
                "train_bps": _rounded(row.get("train_bps"), 4),
                "seconds": _rounded(row.get("seconds"), 1),
                "parameters": row.get("parameters"),
                "status": row_progress(row),
            }
        )
    return rows


def compare_figure(saved: dict[str, Any] | None) -> go.Figure:
    """Three bar charts side by side: test BPS (the axis zoomed to the results, so that differences show),
    training seconds and parameters (log scales) per finished learner, named by :data:`SHORT_NAMES`."""
    rows = [row for row in (saved or {}).get("results") or [] if row.get("status") == DONE]
    figure = make_subplots(
        rows=1, cols=3, subplot_titles=("Test BPS (lower is better)", "Training seconds", "Parameters")
    )
    for column, key in enumerate(("test_bps", "seconds", "parameters"), start=1):
        figure.add_trace(
            go.Bar(
                x=[SHORT_NAMES.get(row["learner"], row["learner"]) for row in rows],
                y=[row.get(key) for row in rows],
                marker_color=[LEARNER_COLOURS.get(row["learner"], "#7f7f7f") for row in rows],
                hovertext=[plain(row.get("label")) for row in rows],
                text=[_bar_text(key, row.get(key)) for row in rows],
                textposition="outside",
                cliponaxis=False,
                showlegend=False,
            ),
            row=1,
            col=column,
        )
    figure.update_yaxes(type="log", row=1, col=2)
    figure.update_yaxes(type="log", row=1, col=3)
    values = [float(row["test_bps"]) for row in rows if row.get("test_bps") is not None]
    if values:
        low, high = min(values), max(values)
        pad = max(0.15 * (high - low), 0.05)
        figure.update_yaxes(range=[max(0.0, low - pad), high + pad], row=1, col=1)
    corpus = (saved or {}).get("corpus")
    figure.update_layout(
        title=f"Learners on {plain(corpus)}" if corpus and rows else "No results yet",  # a file name, escaped
        margin={"l": 50, "r": 20, "t": 70, "b": 40},
        height=380,
    )
    return figure


def _bar_text(key: str, value: Any) -> str:
    if value is None:
        return ""
    if key == "test_bps":
        return f"{float(value):.3f}"
    if key == "seconds":
        return rough_duration(float(value))
    return f"{int(value):,}"


def hierarchy_figure(tree: dict[str, list[Any]] | None) -> go.Figure:
    """The module tree as nested rectangles sized by flow (click a module to zoom into its submodules), each
    labelled with its id and name; hover: its flow and its own codebook's bits (the map equation's term)."""
    if not tree or not tree["ids"]:
        return empty_figure("Module hierarchy", "run Infomap to see the module tree")
    bits = ["" if b is None else f"{b:.3f} bits" for b in tree["bits"]]
    figure = go.Figure(
        go.Treemap(
            ids=tree["ids"],
            labels=[plain(label) for label in tree["labels"]],
            parents=tree["parents"],
            values=tree["flows"],
            marker_colors=tree.get("colours"),
            branchvalues="total",
            text=bits,  # not customdata: Dash's graph reads a trace's "mode" for a point of one with custom data
            texttemplate="%{label}",  # and a treemap has none (a TypeError in the page on its root's hover)
            hovertemplate="%{label}<br>flow %{value:.4f}<br>its codebook %{text}<extra></extra>",
            maxdepth=3,
        )
    )
    figure.update_layout(title="Module hierarchy (area: flow; click to zoom)", margin=MARGIN, height=460)
    return figure


def alluvial_figure(alluvial: dict[str, Any] | None) -> go.Figure:
    """Two Infomap runs side by side, of the same model or of two models with the same clones (a model and its
    pruned copy): each band is the flow of the clones that one run puts in the left module and the other in the
    right one."""
    if not alluvial or not alluvial["flows"]:
        return empty_figure(
            "Two runs compared",
            "run Infomap twice on this model (e.g. Markov time 1, then 0.5), or on it and on its pruned copy",
        )
    before, after = alluvial["before"], alluvial["after"]
    node = {"label": [plain(label) for label in alluvial["labels"]], "pad": 6, "thickness": 12}
    link = {"source": alluvial["sources"], "target": alluvial["targets"], "value": alluvial["flows"]}
    if "colours" in alluvial:  # each module in its colour, the bands in their source's, in flow order
        node |= {"color": alluvial["colours"], "x": alluvial["x"], "y": alluvial["y"]}
        link |= {"color": alluvial["link_colours"]}
    figure = go.Figure(go.Sankey(node=node, link=link, valueformat=".4f", arrangement="snap"))

    def settings(run: dict[str, Any]) -> str:
        threshold = f", threshold {run['threshold']:g}" if run.get("threshold") else ""
        return f"Markov time {run['markov_time']:g}{threshold}, {run['modules']:,} modules"

    which = "The previous model's run" if before.get("other_model") else "The run before"
    figure.update_layout(
        title=f"{which} ({settings(before)}) and the last ({settings(after)})",
        margin=MARGIN,
        height=520,
    )
    return figure


def distributions_figure(found: dict[str, Any] | None) -> go.Figure:
    """Two log-log panels of a community run (:func:`app.services.overviews.distributions`): the top modules' flow
    against their rank (a few large modules and a long tail read at any count), and how many clones have each
    degree in the pruned clone graph."""
    if not found or not found["flows"]:
        return empty_figure("Flow and degree", "run Infomap to see how flow and degree are spread")
    figure = make_subplots(rows=1, cols=2, subplot_titles=("Modules' flow by rank", "Clones by degree"))
    ranks = list(range(1, len(found["flows"]) + 1))
    figure.add_trace(
        go.Scatter(
            x=ranks,
            y=found["flows"],
            mode="lines+markers",
            marker={"size": 4},
            name="module flow",
            hovertemplate="module of rank %{x}<br>flow %{y:.4g}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    figure.add_trace(
        go.Scatter(
            x=found["degrees"],
            y=found["clones"],
            mode="markers",
            marker={"size": 5, "color": VALIDATION_COLOUR},
            name="clones",
            hovertemplate="degree %{x}<br>%{y:,} clones<extra></extra>",
        ),
        row=1,
        col=2,
    )
    figure.update_xaxes(type="log", title_text="rank (most flow first)", row=1, col=1)
    figure.update_yaxes(type="log", title_text="flow", row=1, col=1)
    figure.update_xaxes(type="log", title_text="degree (edges in and out)", row=1, col=2)
    figure.update_yaxes(type="log", title_text="clones", row=1, col=2)
    figure.update_layout(margin=MARGIN, height=340, showlegend=False)
    return figure


# ------------------------------------------------------------------------------------------ Maps page
def room_figure(room: list[list[int]], colours: list[str], wall_colour: str) -> go.Figure:
    """A room as a grid of coloured cells: observation ``o`` in ``colours[o % len(colours)]`` (the map's node
    colours), walls (-1) in ``wall_colour``, each cell labelled with its observation; row 0 at the top, square cells.
    The heatmap draws each cell's rank among the room's distinct values, so its colour scale has one band per distinct
    value: its size is bounded by the room's cells, whatever the values."""
    values = sorted({v for row in room for v in row})
    rank = {value: index for index, value in enumerate(values)}
    bands = max(len(values), 1)
    scale: list[list[Any]] = []
    for index, value in enumerate(values):
        colour = wall_colour if value < 0 else colours[value % len(colours)]
        scale += [[index / bands, colour], [(index + 1) / bands, colour]]
    if not scale:
        scale = [[0.0, wall_colour], [1.0, wall_colour]]
    text = [["wall" if v < 0 else str(v) for v in row] for row in room]
    figure = go.Figure(
        go.Heatmap(
            z=[[rank[v] for v in row] for row in room],
            text=text,
            texttemplate="%{text}",
            colorscale=scale,
            zmin=-0.5,
            zmax=bands - 0.5,
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="row %{y}, column %{x}: %{text}<extra></extra>",
        )
    )
    figure.update_layout(
        margin={"l": 30, "r": 10, "t": 30, "b": 20},
        height=60 + 42 * len(room),
        title={"text": f"{len(room)} x {len(room[0]) if room else 0} room", "font": {"size": 13}},
        xaxis={"side": "top", "dtick": 1, "constrain": "domain"},
        yaxis={"autorange": "reversed", "dtick": 1, "scaleanchor": "x"},
        plot_bgcolor="white",
    )
    return figure


def place_field_figure(field: dict[str, Any] | None, note: str = "") -> go.Figure:
    """A clone's place field (:func:`app.services.maps.place_field`): its mean activation in every cell of the room,
    blank where the walk never went."""
    if not field:
        return empty_figure(note=note or "Click a clone on the map to see its place field.")
    rows = field["field"]
    figure = go.Figure(
        go.Heatmap(
            z=rows,
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            xgap=1,
            ygap=1,
            colorbar={"title": {"text": "P(clone)"}, "thickness": 12},
            hovertemplate="row %{y}, column %{x}: %{z:.3f}<extra></extra>",
        )
    )
    figure.update_layout(
        title={
            "text": f"Place field of clone {field['clone']} (observation {plain(field['symbol'])})",
            "font": {"size": 13},
        },
        margin={"l": 30, "r": 10, "t": 40, "b": 20},
        height=80 + 42 * len(rows),
        xaxis={"side": "top", "dtick": 1, "constrain": "domain"},
        yaxis={"autorange": "reversed", "dtick": 1, "scaleanchor": "x"},
        plot_bgcolor="#eeeeee",
    )
    return figure


SCHEMA_CHOSEN_COLOUR = "#2ca02c"


def schema_figure(fits: list[dict[str, Any]] | None) -> go.Figure:
    """The schema match: every stored map's held-out bits per step as a horizontal bar (lower is better), best at
    the top, the chosen one green."""
    if not fits:
        return empty_figure("Held-out bits per step of each map", "match a walk to the library")
    names = [plain(fit["name"]) for fit in fits]
    bits = [fit["held_out_bits"] for fit in fits]  # None: the map makes the steps impossible
    colours = [SCHEMA_CHOSEN_COLOUR if bits[0] is not None else TRAIN_COLOUR] + [TRAIN_COLOUR] * (len(fits) - 1)
    figure = go.Figure(
        go.Bar(
            x=[0.0 if b is None else float(b) for b in bits], y=names, orientation="h", marker_color=colours,
            text=["impossible" if b is None else f"{b:.4f}" for b in bits], textposition="outside",
            hovertemplate="%{y}: %{text} bits per step<extra></extra>", cliponaxis=False,
        )
    )  # fmt: skip
    figure.update_layout(
        title="Held-out bits per step of each map (lower fits better; the chosen one green)",
        margin=MARGIN,
        height=max(220, 60 + 36 * len(fits)),
        xaxis={"title": "bits per step on the walk's held-out tail"},
        yaxis={"autorange": "reversed"},
    )
    return figure
