"""Tests of the training recipe around the learner (engine/workflows.py): restarts kept on validation, online EM
followed by batch EM with the refit continuing from the online stage, and the command line's --restarts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import cli, learning, synthetic, workflows

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def toy_text(k: int, length: int, seed: int) -> str:
    return "".join(ALPHABET[s] for s in synthetic.toy_fsm_sequence(k, length, np.random.default_rng(seed)))


def options(**changes: object) -> workflows.TrainOptions:
    base = workflows.TrainOptions(states=20, allocation="uniform", normalisation="raw", iterations=15)
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def test_restarts_keep_the_best_on_validation() -> None:
    corpus = toy_text(2, 6000, 0)
    records: list[learning.IterationRecord] = []
    outcome = workflows.train_text(corpus, options(restarts=3, refit=False), callback=records.append)
    restarts = outcome.summary["restarts"]
    assert [r["restart"] for r in restarts] == [0, 1, 2]
    assert outcome.summary["validation_bps"] == pytest.approx(min(r["bps"] for r in restarts), abs=1e-9)
    assert {r.restart for r in records} == {0, 1, 2}
    # restart 0 is the run a single start makes
    single = workflows.train_text(corpus, options(restarts=1, refit=False))
    assert "restarts" not in single.summary
    assert single.summary["validation_bps"] == pytest.approx(restarts[0]["bps"], abs=1e-9)


def test_restarts_start_from_different_models() -> None:
    corpus = workflows.prepare_training_corpus(toy_text(2, 3000, 1), options(), "toy", None)
    first = workflows.initial_model_for(corpus, options(), 0)
    second = workflows.initial_model_for(corpus, options(), 1)
    third = workflows.initial_model_for(corpus, options(), 2)
    assert not np.allclose(first.T, second.T) and not np.allclose(first.T, third.T)
    assert np.array_equal(first.T, workflows.initial_model_for(corpus, options(), 0).T)


def test_online_em_then_batch_em_and_the_refit_continues_from_online() -> None:
    corpus = toy_text(2, 6000, 2)
    outcome = workflows.train_text(corpus, options(algorithm="online", restarts=1, iterations=40))
    result = outcome.result
    assert result.online_model is not None and result.online_iterations >= 1
    assert len(result.history) > result.online_iterations  # batch EM iterations follow the online epochs
    polish = max(0, result.best_iteration - result.online_iterations)
    assert outcome.summary["refit_iterations"] == polish
    if polish:  # the refit is batch EM from the online stage's model on training + validation text
        again = learning.fit(
            result.online_model,
            outcome.corpus.train_full_parts,
            None,
            learning.TrainingConfig(max_iterations=polish, tolerance=0.0, pseudocount=options().pseudocount),
        )
        assert np.allclose(again.model.T, outcome.model.T.astype(np.float64), atol=1e-5)


def test_online_em_without_validation_is_online_only() -> None:
    outcome = workflows.train_text(toy_text(2, 4000, 3), options(algorithm="online", restarts=1, validation=0.0))
    assert outcome.result.online_model is None


def test_cli_restarts_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "toy.txt"
    corpus.write_text(toy_text(2, 3000, 4))
    out = tmp_path / "m.npz"
    args = ["train", str(corpus), "-o", str(out), "--states", "20", "--allocation", "uniform", "--normalisation"]
    assert cli.main([*args, "raw", "--iterations", "3", "--restarts", "2", "--quiet", "--json"]) == 0
    assert '"restarts"' in capsys.readouterr().out
    assert cli.main([*args, "raw", "--restarts", "0", "--quiet"]) != 0
    assert "restarts must be from 1" in capsys.readouterr().err
    assert cli.main(["train", str(corpus), "-o", str(tmp_path / "n.npz"), "--init", str(out), "--restarts", "3"]) != 0
    assert "--init continues one model" in capsys.readouterr().err
    assert not (tmp_path / "n.npz").exists()
