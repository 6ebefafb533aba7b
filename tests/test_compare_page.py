"""The Compare page without a browser: its services (input checks, the comparison job, rows, figure, cancel) and
that the page registers and serves. Every test works in its own ``CHMM_DATA_DIR``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support import SHORT_TEXT, data_uri

from app import figures, forms, jobs, panels, sessions
from app.services import UserError, comparisons
from app.services import corpus as corpus_service
from engine import api

TINY = {
    "chmm": {"states": 60, "iterations": 2},
    "densehmm": {"n_states": 4, "dim": 2, "iterations": 2, "m_steps": 2},
    "hmm": {"n_states": 4, "iterations": 2},
    "pdfa": {},
    "ngram": {"max_order": 3},
    "seqm": {},
    "rnn": {"hidden": 8, "minutes": 1, "epochs": 2},
}


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> Path:
    """Every test in its own data folder."""
    return data_dir


def test_learners_are_checked_and_ordered() -> None:
    assert forms.check_learners(["ngram", "chmm"]) == ["chmm", "ngram"]
    assert forms.check_learners("pdfa") == ["pdfa"]
    for bad in (None, [], ""):
        with pytest.raises(UserError, match="Pick at least one learner"):
            forms.check_learners(bad)
    with pytest.raises(UserError, match="Unknown learner 'transformer'"):
        forms.check_learners(["chmm", "transformer"])


def test_corpus_choice(folder: Path) -> None:
    corpus_text, name = comparisons.compare_corpus(folder, "sample")
    assert name == "carroll-alice.txt" and len(corpus_text) > 100_000
    with pytest.raises(UserError, match="no corpus yet"):
        comparisons.compare_corpus(folder, "session")
    with pytest.raises(UserError, match="Choose the corpus"):
        comparisons.compare_corpus(folder, "elsewhere")
    corpus_service.store_corpus(folder, data_uri(b"abc def " * 100), "small.txt")
    assert comparisons.compare_corpus(folder, "session") == ("abc def " * 100, "small.txt")


def test_comparison_trains_every_learner_and_keeps_the_figures(with_corpus: Path) -> None:
    reports: list[dict] = []
    saved = comparisons.run_compare_job(with_corpus, list(TINY), "session", report=reports.append, options=TINY)
    assert saved["status"] == jobs.FINISHED and saved["corpus"] == "alice-short.txt"
    assert [row["learner"] for row in saved["results"]] == list(api.LEARNERS)
    for row in saved["results"]:
        assert row["status"] == comparisons.DONE, row
        assert 0 < row["test_bps"] < 6 and row["seconds"] >= 0 and row["parameters"] > 0
    assert comparisons.read_compare(with_corpus)["results"] == json.loads(json.dumps(saved["results"]))
    # the page was told about every learner starting and finishing
    assert reports[0]["status"] == jobs.RUNNING and reports[-1]["status"] == jobs.FINISHED
    assert any(r["results"][0]["status"] == comparisons.TRAINING for r in reports)
    assert figures.compare_progress(reports[0])[0] == 0 and figures.compare_progress(saved) == (100, saved["message"])
    values = [figures.compare_progress(r)[0] for r in reports[:-1]]
    assert len({v for v in values if 0 < v < 100}) > 2  # the CHMM's iterations move the bar
    rows = figures.compare_rows(saved)
    assert rows[0]["learner"] == "CHMM (online EM), 60 clones, 2 iterations"
    assert rows[1]["learner"] == "DenseHMM (Sicking et al.), 4 states, 2 l (embedding size)"
    assert rows[3]["learner"] == "PAC PDFA (Gavaldà et al.)" and rows[4]["learner"] == "Kneser-Ney n-gram, order <= 3"
    assert all(r["status"] == "done" and isinstance(r["test_bps"], float) for r in rows)
    figure = figures.compare_figure(saved)
    assert len(figure.data) == 3 and list(figure.data[0].x) == [forms.SHORT_NAMES[k] for k in TINY]
    linked = figures.compare_figure(saved | {"corpus": '<a href="https://example.com">x</a>.txt'})  # issue 51
    assert "<a href" not in linked.layout.title.text and "&lt;a href" in linked.layout.title.text
    assert figure.layout.yaxis3.type == "log" and figure.layout.yaxis2.type == "log"
    values = [row["test_bps"] for row in saved["results"]]
    low, high = figure.layout.yaxis.range  # zoomed to the results, not from 0
    pad = max(0.15 * (max(values) - min(values)), 0.05)
    assert low == pytest.approx(max(0.0, min(values) - pad)) and high == pytest.approx(max(values) + pad)
    assert low < min(values) and max(values) < high
    # every row knows its settings and its estimate; the CHMM reported its iterations and was kept
    chmm = saved["results"][0]
    assert chmm["settings"]["states"] == 60 and chmm["estimate"] > 0 and chmm["iteration"] >= 1 and chmm["model"]
    assert not comparisons.compare_running(with_corpus)


def test_settings_estimates_and_the_default_corpus(folder: Path) -> None:
    assert forms.learner_settings({"chmm": {"states": "300", "iterations": ""}, "ngram": {"max_order": 5}}) == {
        "chmm": {"states": 300},
        "densehmm": {},
        "hmm": {},
        "pdfa": {},
        "ngram": {"max_order": 5},
        "seqm": {},
        "rnn": {},
    }
    with pytest.raises(UserError, match="CHMM's clones must be a whole number from 2 to 10,000"):
        forms.learner_settings({"chmm": {"states": 1e6}})
    with pytest.raises(UserError, match="n-gram's order at most"):
        forms.learner_settings({"ngram": {"max_order": 2.5}})
    base = forms.estimate_seconds("hmm", {"n_states": 100}, 106_910)
    assert base == pytest.approx(50) and forms.estimate_seconds("hmm", {"n_states": 200}, 106_910) == pytest.approx(200)
    assert forms.estimate_seconds("ngram", {}, 2 * 106_910) == pytest.approx(0.8)
    # a learner with a time budget is estimated at most at its budget
    assert forms.estimate_seconds("rnn", {"hidden": 256, "minutes": 1}, 10 * 106_910) == pytest.approx(60)
    assert forms.estimate_seconds("rnn", {"hidden": 256, "minutes": 10}, 106_910) == pytest.approx(110)
    assert comparisons.default_corpus(folder) == "sample"
    assert 120_000 < comparisons.training_symbols(folder, "sample") < 135_000
    corpus_service.store_corpus(folder, data_uri(b"abc def " * 100), "small.txt")
    assert comparisons.default_corpus(folder) == "session" and comparisons.training_symbols(folder, "session") == 720


def test_progress_moves_while_a_learner_trains() -> None:
    now = time.time()
    rows = [
        {"status": comparisons.DONE, "message": ""},
        {"status": comparisons.TRAINING, "started": now - 30, "estimate": 60.0},
        {"status": comparisons.PENDING, "estimate": 5.0},
    ]
    saved = {"status": jobs.RUNNING, "results": rows, "message": "m"}
    assert figures.compare_progress(saved) == (50, "m")  # (1 + 0.5 + 0) / 3
    assert figures.row_progress(rows[1], now) == "training, 30 s of about 60 s"
    assert figures.row_progress(rows[2]) == "waiting (about 5.0 s)"
    rows[1].update(started=now - 600)
    assert figures.compare_progress(saved)[0] == int(100 * 1.95 / 3)  # at most 95% until it ends
    chmm = {"status": comparisons.TRAINING, "started": now, "iteration": 15, "settings": {"iterations": 30}}
    assert figures._fraction(chmm, now) == 0.25 and figures.row_progress(chmm, now).startswith("training: iteration 15")


def test_the_compared_chmm_can_be_made_current(with_corpus: Path) -> None:
    from app import sessions
    from app.services import models as model_service

    with pytest.raises(UserError, match="kept no CHMM"):
        comparisons.make_compared_current(with_corpus)
    saved = comparisons.run_compare_job(with_corpus, ["chmm"], "session", options=TINY)
    assert saved["status"] == jobs.FINISHED
    before = sessions.model_stamp(with_corpus)
    message = comparisons.make_compared_current(with_corpus)
    assert "alice-short.txt is now the current model" in message and sessions.model_stamp(with_corpus) != before
    current = model_service.load_current(with_corpus)
    assert current.n_states == 60 and current.metadata["test_bps"] == pytest.approx(saved["results"][0]["test_bps"])
    assert sessions.previous_model_path(with_corpus).is_file()
    comparisons.make_compared_current(with_corpus)  # again: the kept file is still there (a copy was installed)


def test_bad_input_is_refused_with_a_message(folder: Path) -> None:
    saved = comparisons.run_compare_job(folder, [], "sample")
    assert saved["status"] == jobs.REFUSED and "Pick at least one learner" in saved["message"]
    saved = comparisons.run_compare_job(folder, ["ngram"], "session")
    assert saved["status"] == jobs.REFUSED and "no corpus yet" in saved["message"]
    with pytest.raises(UserError, match="contains only the symbol 'a'"):  # refused at upload now (issue 36)
        corpus_service.store_corpus(folder, data_uri(b"aaaaaaaa"), "tiny.txt")
    assert comparisons.read_compare(folder) is None  # a refusal writes nothing
    assert figures.compare_rows(comparisons.read_compare(folder)) == []
    assert figures.compare_figure(None).layout.title.text == "No results yet"


def test_a_refused_comparison_keeps_the_last_one(with_corpus: Path) -> None:
    finished = comparisons.run_compare_job(with_corpus, ["ngram"], "session", options=TINY)
    assert finished["status"] == jobs.FINISHED
    refused = comparisons.run_compare_job(with_corpus, [], "session")
    assert refused["status"] == jobs.REFUSED
    kept = comparisons.latest_compare(with_corpus)
    assert kept["status"] == jobs.FINISHED and kept["key"] == finished["key"]
    assert len(figures.compare_rows(kept)) == 1 and kept["results"][0]["learner"] == "ngram"


def test_one_failing_learner_does_not_stop_the_others(with_corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = TINY | {"hmm": {"n_states": 0}}
    saved = comparisons.run_compare_job(with_corpus, ["hmm", "ngram"], "session", options=options)
    assert saved["status"] == jobs.FINISHED
    hmm, ngram = saved["results"]
    assert hmm["status"] == jobs.FAILED and "n_states" in hmm["message"] and hmm.get("test_bps") is None
    assert ngram["status"] == comparisons.DONE
    assert "failed: " in figures.compare_rows(saved)[0]["status"]
    assert len(figures.compare_figure(saved).data[0].x) == 1
    monkeypatch.setenv("CHMM_MAX_TRAIN_MB", "0.001")
    saved = comparisons.run_compare_job(with_corpus, ["chmm"], "session", options=TINY)
    assert saved["status"] == jobs.FAILED and "CHMM_MAX_TRAIN_MB" in saved["results"][0]["message"]


def test_cancel_stops_before_the_next_learner(with_corpus: Path) -> None:
    def report(saved: dict) -> None:
        if saved["results"] and saved["results"][0]["status"] == comparisons.DONE:
            comparisons.request_cancel(with_corpus)

    saved = comparisons.run_compare_job(with_corpus, ["pdfa", "ngram"], "session", report=report, options=TINY)
    assert saved["status"] == jobs.CANCELLED
    assert [row["status"] for row in saved["results"]] == [comparisons.DONE, comparisons.SKIPPED]
    assert comparisons.request_cancel(with_corpus) == "No comparison is running."


def test_a_comparison_waits_for_a_slot(with_corpus: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Comparisons share the server's CHMM_MAX_JOBS slots with training: with the only slot taken, a comparison
    waits and says its place; cancelled there, it trains nothing."""
    from app import jobs

    monkeypatch.setenv("CHMM_MAX_JOBS", "1")
    other = jobs.JobSlot(data_dir, 1)
    assert other.acquire(lambda place: None, stop=lambda: True)
    seen: list[str] = []

    def report(saved: dict) -> None:
        seen.append(saved.get("message", ""))
        if "number 1 in the queue" in saved.get("message", ""):
            comparisons.request_cancel(with_corpus)

    try:
        saved = comparisons.run_compare_job(with_corpus, ["ngram"], "session", report=report, options=TINY)
    finally:
        other.release()
    assert any("Waiting for a free place: number 1 in the queue" in message for message in seen)
    assert saved["status"] == jobs.CANCELLED and [row["status"] for row in saved["results"]] == [comparisons.SKIPPED]
    assert comparisons.run_compare_job(with_corpus, ["ngram"], "session", options=TINY)["status"] == jobs.FINISHED


def test_a_second_job_is_refused_and_a_dead_one_is_reported(with_corpus: Path) -> None:
    running = {"key": "k", "status": jobs.RUNNING, "corpus": "x", "results": [comparisons._row("ngram")]}
    (with_corpus / comparisons.COMPARE).write_text(json.dumps(running), encoding="utf-8")
    (with_corpus / comparisons.HEARTBEAT).touch()
    assert comparisons.compare_running(with_corpus)
    saved = comparisons.run_compare_job(with_corpus, ["ngram"], "session")
    assert saved["status"] == jobs.REFUSED and "already running" in saved["message"]
    assert comparisons.read_compare(with_corpus)["key"] == "k"  # the running job's file is untouched
    old = time.time() - 60
    os.utime(with_corpus / comparisons.HEARTBEAT, (old, old))
    assert not comparisons.compare_running(with_corpus)
    latest = comparisons.latest_compare(with_corpus)
    assert latest["status"] == jobs.FAILED and latest["results"][0]["status"] == comparisons.SKIPPED
    assert "cancelled" in comparisons.request_cancel(with_corpus)
    assert comparisons.read_compare(with_corpus)["status"] == jobs.CANCELLED


def test_compare_page_registers_and_serves(data_dir: Path) -> None:
    import dash

    from app import ids, main

    pages = {page["path"]: page for page in dash.page_registry.values()}
    assert "/compare" in pages and pages["/compare"]["module"] == "app.pages.compare"
    layout = str(pages["/compare"]["layout"]())
    for component in (
        ids.COMPARE_LEARNERS,
        ids.COMPARE_CORPUS,
        panels.COMPARISON.start,
        ids.COMPARE_TABLE,
        ids.COMPARE_CHART,
    ):
        assert component in layout
    client = main.server.test_client()
    assert client.get("/compare").status_code == 200
    dependencies = client.get("/_dash-dependencies").get_data(as_text=True)
    assert panels.COMPARISON.result in dependencies and ids.COMPARE_TABLE in dependencies


def test_the_chmm_estimate_counts_its_restarts_and_batch_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35, defect 11: the CHMM's estimate was 10 times too low (5.1 s estimated, 49.5 s taken): it priced one
    online EM run, and the page runs four restarts, each online EM then batch EM."""
    from engine import training

    monkeypatch.setenv(training.RESTART_PROCESSES_ENV, "2")
    one_run = forms.SECONDS_PER_SYMBOL["chmm"] * 106_910
    assert forms.estimate_seconds("chmm", {}, 106_910) == pytest.approx(one_run * 2 * 2)  # 2 rounds of 2, online+batch
    assert forms.estimate_seconds("chmm", {"iterations": 60}, 106_910) == pytest.approx(one_run * 2 * 2 * 2)


def test_a_learner_expected_to_pass_the_job_limit_is_refused(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: a DenseHMM the page itself estimated at 26.5 hours was accepted and held the only job slot."""
    monkeypatch.setenv("CHMM_MAX_JOB_MINUTES", "60")
    big = {"densehmm": {"n_states": 1000, "dim": 256}}
    assert forms.estimate_seconds("densehmm", big["densehmm"], 106_910) > 3600
    saved = comparisons.run_compare_job(folder, ["densehmm"], "sample", options=big)
    assert saved["status"] == jobs.REFUSED
    assert "would take about" in saved["message"] and "limit of 60 minutes per job" in saved["message"]
    assert comparisons.read_compare(folder) is None  # nothing started, nothing written


def test_a_comparison_of_words_trains_every_learner_on_words(with_corpus: Path) -> None:
    """The Compare page compared characters only. With the unit "words" every learner reads the same words (the
    n-gram and the CHMM score per word), and the CHMM gets a clone per word and some to spare."""
    picked = {"chmm": TINY["chmm"], "ngram": {}}
    saved = comparisons.run_compare_job(with_corpus, list(picked), "session", options=picked, unit="words")
    assert saved["status"] == jobs.FINISHED and saved["unit"] == "words", saved
    prepared = api.corpora.prepare_corpus(SHORT_TEXT, normalisation="paper", unit="words")
    assert saved["symbols"]["test"] == len(prepared.test)
    chmm, ngram = saved["results"]
    assert chmm["status"] == ngram["status"] == comparisons.DONE
    assert chmm["settings"]["states"] == prepared.n_symbols + comparisons.SPARE_STATES
    assert 2 < ngram["test_bps"] < 12 and 2 < chmm["test_bps"] < 14  # bits per word, not per character
    model = api.load_model(with_corpus / sessions.JOBS / comparisons.COMPARED_CHMM)
    assert model.codec.unit == "words"
    with pytest.raises(UserError, match="Unknown unit 'syllables'"):
        comparisons.check_comparison(with_corpus, ["ngram"], "session", None, "syllables")


def test_a_learner_whose_library_is_missing_is_offered_disabled_with_how_to_add_it(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dash

    from app import ids

    sentence = 'The Recurrent network (char-rnn) needs torch, which is not installed here: pip install -e ".[rnn]".'
    monkeypatch.setattr(api.learners, "learner_available", lambda kind: sentence if kind == "rnn" else None)
    pages = {page["path"]: page for page in dash.page_registry.values()}
    layout = pages["/compare"]["layout"]()
    checklist = next(c for c in _walk(layout) if getattr(c, "id", None) == ids.COMPARE_LEARNERS)
    assert [o["value"] for o in checklist.options if o["disabled"]] == ["rnn"]
    assert "rnn" not in checklist.value and sentence in str(layout)
    monkeypatch.setattr(api.learners, "learner_available", lambda kind: None)
    checklist = next(c for c in _walk(pages["/compare"]["layout"]()) if getattr(c, "id", None) == ids.COMPARE_LEARNERS)
    assert not any(o["disabled"] for o in checklist.options) and "rnn" not in checklist.value  # it takes minutes


def _walk(component):
    yield component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        if hasattr(child, "to_plotly_json"):
            yield from _walk(child)
