"""One set of training defaults, the recipe that wins, read by the command line, the app's Train page and the
Python API alike (issue 34)."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from engine import cli, training
from engine.backends import model_files
from engine.cli import train

DATA = Path(__file__).parent / "data"
BLAKE = DATA / "blake-poems.txt"


def test_the_defaults_are_the_recipe() -> None:
    """Online EM (then batch EM from its best epoch), the states and pseudocount chosen on validation within a
    stated budget, then the refit."""
    defaults = training.TrainOptions()
    assert defaults.algorithm == "online"
    assert defaults.states == training.AUTO and defaults.pseudocount == training.AUTO and defaults.searches
    assert defaults.budget == training.options.BUDGET_MINUTES > 0
    assert defaults.refit


def test_a_plain_chmm_train_reads_the_engine_defaults(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(["train", str(BLAKE), "-o", str(tmp_path / "m.npz")])
    assert train.train_options(args) == training.TrainOptions()


def _field_values(layout: Any) -> dict[str, Any]:
    """Every component id of ``layout`` with its ``value``."""
    found, stack = {}, [layout]
    while stack:
        node = stack.pop()
        if getattr(node, "id", None) is not None and hasattr(node, "value"):
            found[node.id] = node.value
        children = getattr(node, "children", None)
        stack.extend(children if isinstance(children, list) else [children] if children is not None else [])
    return found


def test_the_train_page_starts_from_the_engine_defaults(data_dir: Path) -> None:
    """The Train page's fields as it first shows them give the engine's defaults (the memory bound of the server
    aside), so Start without a change trains as a plain ``chmm train`` does."""
    import app.main  # noqa: F401  (registers the pages)
    from app import forms
    from app.pages import train as train_page

    values = _field_values(train_page.layout())
    form = {name: values[component] for name, component in train_page.FORM}
    assert form["states"] is None and form["pseudocount"] is None  # empty: chosen on validation
    options = forms.options_from_form(form)
    assert replace(options, max_memory=None) == training.TrainOptions()


def test_a_continued_model_keeps_its_states_and_pseudocount(tmp_path: Path) -> None:
    options = training.TrainOptions(states=60, pseudocount=1e-3, algorithm="em", iterations=2, refit=False)
    model = training.train_text(BLAKE.read_text(encoding="utf-8"), options).model
    continuing = training.TrainOptions().continuing(model)
    assert continuing.states == model.n_states and continuing.pseudocount == 1e-3 and not continuing.searches
    assert training.TrainOptions(pseudocount=1e-5).continuing(model).pseudocount == 1e-5  # given: kept
    model.metadata = {}  # a file that does not say how it was trained
    assert training.TrainOptions().continuing(model).pseudocount == training.options.FIRST_PSEUDOCOUNT
    path = tmp_path / "m.npz"
    model_files.save_model(model, path)
    again = training.train_text(BLAKE.read_text(encoding="utf-8"), training.TrainOptions(init=str(path), iterations=1))
    assert again.model.n_states == model.n_states
    assert asdict(training.TrainOptions())["budget"] == training.options.BUDGET_MINUTES


@pytest.mark.parametrize("given", [["--states", "60", "--pseudocount", "1e-3"], ["--init", "MODEL"]])
def test_a_budget_with_nothing_to_choose_is_refused(
    given: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "MODEL" in given:
        model = training.train_text(
            BLAKE.read_text(encoding="utf-8"),
            training.TrainOptions(states=60, pseudocount=1e-3, algorithm="em", iterations=1, refit=False),
        ).model
        model_files.save_model(model, tmp_path / "init.npz")
        given = ["--init", str(tmp_path / "init.npz")]
    code = cli.main(["train", str(BLAKE), "-o", str(tmp_path / "m.npz"), *given, "--budget", "3", "--quiet"])
    assert code != 0
    assert "--budget bounds the choice of states and pseudocount" in capsys.readouterr().err


def test_chmm_train_reports_our_ngram_on_the_same_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from engine.peers import learners

    out = tmp_path / "m.npz"
    args = ["train", str(BLAKE), "-o", str(out), "--states", "80", "--pseudocount", "1e-3", "--iterations", "2"]
    assert cli.main([*args, "--algorithm", "em", "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    _, alone = learners.train_peer_text(BLAKE.read_text(encoding="utf-8"), "ngram")  # the same protocol and split
    assert summary["ngram"]["validation_bps"] == pytest.approx(alone["validation_bps"], abs=1e-12)
    assert summary["ngram"]["test_bps"] == pytest.approx(alone["test_bps"], abs=1e-12)
    assert model_files.load_model(out).metadata["ngram"]["validation_bps"] == summary["ngram"]["validation_bps"]
    assert cli.main([*args, "--algorithm", "em", "--quiet"]) == 0
    assert "our Kneser-Ney n-gram on the same split: BPS validation" in capsys.readouterr().out


def test_a_hopeless_learning_curve_is_judged_so() -> None:
    from engine.training.search import HOPELESS_AFTER, hopeless

    assert hopeless([2.0, 1.95, 1.93], 1.70)  # falling by 0.02 an iteration, 0.23 above the best: it cannot reach it
    assert not hopeless([2.0, 1.8, 1.6], 1.50)  # still falling fast
    assert not hopeless([2.0, 1.95], 1.0)  # too early to judge
    assert len([2.0, 1.95]) < HOPELESS_AFTER
    assert not hopeless([2.0, 1.95, 1.93], float("inf"))  # nothing to compare with yet
    assert not hopeless([1.75, 1.72, 1.71], 1.70)  # close, and its gains could still get it there


def test_the_search_stops_a_hopeless_candidate_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """A constructed search: the first candidate reaches 1.70; the next one's curve crawls far above it and is
    stopped after its first judged iterations; a third, falling fast, runs to its end."""
    from types import SimpleNamespace

    from engine.training import learning, stages
    from engine.training import search as search_mod

    curves = {
        1e-4: [2.0, 1.8, 1.72, 1.70],
        1e-3: [2.10, 2.09, 2.085, 2.08, 2.078, 2.077, 2.076, 2.075],
        1e-5: [1.9, 1.8, 1.75, 1.72, 1.71, 1.705],
    }

    def fake_select(corpus_text, corpus, options, init_model, run, name, restarts=None):  # type: ignore[no-untyped-def]
        history, stopped = [], "converged"
        for i, value in enumerate(curves[options.pseudocount]):
            if run.cancel is not None and run.cancel.cancelled:
                stopped = "cancelled"
                break
            record = learning.IterationRecord(i + 1, value, value, 0.0)
            history.append(record)
            run.callback(record)
        result = learning.TrainingResult(model=min(r.validation_bps for r in history), history=history, stopped=stopped)
        return training.options.Selection(options, None, result, None)

    monkeypatch.setattr(stages, "sequences_bps", lambda model, sequences, backend: model)
    options = training.TrainOptions(states=300, pseudocount=training.AUTO, restarts=1, budget=None)
    corpus = SimpleNamespace(validation_parts=[], train=[0], train_full=[0])
    selection, record = search_mod.search_settings(
        "", corpus, options, training.options.RunContext(), "curve", fake_select
    )
    assert [line["pseudocount"] for line in record] == [1e-4, 1e-3, 1e-5]
    assert record[1]["stopped"] == "hopeless" and record[1]["iterations"] == search_mod.HOPELESS_AFTER
    assert "stopped" not in record[0] and "stopped" not in record[2] and record[2]["iterations"] == 6
    assert selection.options.pseudocount == 1e-4


def test_the_time_is_stated_before_the_start_and_kept_beside_what_it_took(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    defaults = training.TrainOptions()
    assert training.expected_minutes(defaults) == pytest.approx(
        training.options.BUDGET_MINUTES * (1 + training.options.REFIT_SHARE)
    )
    assert training.expected_sentence(defaults).startswith("At most about 13 minutes: the states and pseudocount")
    assert training.expected_minutes(replace(defaults, refit=False)) == training.options.BUDGET_MINUTES
    assert training.expected_sentence(replace(defaults, budget=0.5, refit=False)).startswith("Under a minute")
    assert training.expected_minutes(replace(defaults, states=300, pseudocount=1e-3)) is None  # nothing to choose
    out = tmp_path / "m.npz"
    args = ["train", str(BLAKE), "-o", str(out), "--states", "60", "--iterations", "2", "--restarts", "1"]
    assert cli.main([*args, "--budget", "0.2", "--json"]) == 0
    captured = capsys.readouterr()
    assert "Under a minute: the states and pseudocount chosen on validation within 0.2 min" in captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["expected_minutes"] == pytest.approx(0.2 * (1 + training.options.REFIT_SHARE))
    assert summary["chosen"]["states"] == 60 and "lowest validation BPS" in summary["chosen"]["reason"]
    assert model_files.load_model(out).metadata["chosen"] == summary["chosen"]


def test_online_epochs_are_not_judged() -> None:
    """Online EM starts slowly and crawls along plateaus before it drops: on a novel, the 3,000-state candidates
    were stopped after 3 epochs at 2.1 validation BPS (the best so far 2.02) and the search kept 1,000 states. Only
    the batch EM that follows online EM is judged."""
    from engine.training import learning
    from engine.training.search import _Judge

    judge = _Judge(2.02, None)
    for i, value in enumerate([2.30, 2.25, 2.22, 2.20, 2.19], 1):  # online epochs, far above the best, crawling
        judge.observe(learning.IterationRecord(i, value, value, 0.1, online=True))
    assert not judge.stopped and not judge.cancel.cancelled
    for i, value in enumerate([1.99, 1.97, 1.96], 6):  # batch EM from the best epoch: below the best, still going
        judge.observe(learning.IterationRecord(i, value, value, 0.1))
    assert not judge.stopped
    crawling = _Judge(1.50, None)
    for i, value in enumerate([2.10, 2.09, 2.085], 1):  # batch EM far above the best, crawling: hopeless
        crawling.observe(learning.IterationRecord(i, value, value, 0.1))
    assert crawling.stopped and crawling.cancel.cancelled


@pytest.mark.parametrize(
    ("fields", "cluster", "message"),
    [
        ({"burn_in": 10}, False, "--burn-in belongs to chunks"),
        ({"chunk": 5_000, "burn_in": 10, "backend": "cpu"}, False, "--chunk cuts documents into chunks"),
        ({"algorithm": "viterbi"}, True, "not Viterbi EM"),
        ({"states": 100, "pseudocount": 1e-3, "budget": 3.0}, False, "--budget bounds the choice"),
    ],
)
def test_the_training_options_own_every_rule(fields: dict, cluster: bool, message: str) -> None:
    """The rules the command line once kept for itself are TrainOptions' (the CLI, the app and the cluster call
    it), and each allows what it should: chunks on a cluster or in lockstep (gpu-sim), Viterbi EM off a cluster."""
    with pytest.raises(ValueError, match=message):
        training.TrainOptions(**fields).validate(cluster=cluster)
    allowed = {
        "--burn-in belongs": ({**fields, "chunk": 5_000}, True),
        "--chunk cuts": ({**fields, "backend": "gpu-sim"}, False),
        "not Viterbi EM": (fields, False),
        "--budget bounds": ({**fields, "pseudocount": training.AUTO}, False),
    }[next(k for k in ("--burn-in belongs", "--chunk cuts", "not Viterbi EM", "--budget bounds") if k in message)]
    training.TrainOptions(**allowed[0]).validate(cluster=allowed[1])


def test_continuing_a_model_keeps_its_states() -> None:
    """The rule lives in the options (the command line, the app and the cluster share it): a model continued with
    ``init`` keeps its own number of states, so a number given beside it is refused, and ``auto`` is not a number."""
    with pytest.raises(ValueError, match="--init continues a model with its own states"):
        training.TrainOptions(init="model.npz", states=60, pseudocount=1e-3).validate()
    training.TrainOptions(init="model.npz", pseudocount=1e-3).validate()
