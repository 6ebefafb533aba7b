"""What ``chmm train`` saves (issue 48, item 3): T pruned at the largest threshold within the prune bound, the
expected counts only when asked for. Checked against float64 references: a forward pass over the dense H x H T
and the symbol bigram of the dense counts."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support import FIXED

from engine import api, cli
from engine.model.blocks import BlockLayout
from engine.model.dense import BACKOFF_WEIGHT, CHMM, load, random_model
from engine.training import saving
from engine.training.options import TrainOutcome
from engine.training.stages import prepare_training_corpus, sequences_bps

DATA = Path(__file__).parent / "data"
BLAKE = DATA / "blake-poems.txt"
REPEATED = "the cat sat on the mat. the dog ran to the cat. " * 120


def reference_bps(model: CHMM, sequences: list[np.ndarray], counts: np.ndarray | None) -> float:
    """BPS in float64 as the scorer defines it: forward over the dense T (a zero step restarts the message uniform
    over the symbol's clones), mixed with weight w = ``model.backoff_weight`` with the add-1/2 symbol bigram of the
    dense ``counts`` (flat layout of ``model``; None: uniform), the first symbol's back-off uniform."""
    T = model.dense_T()
    start = model.layout.clone_start
    n = model.n_symbols
    table = np.zeros((n, n))
    if counts is not None:
        dense_counts = model.with_arrays(T=np.asarray(counts, dtype=np.float64), counts=None).dense_T()
        for i in range(n):
            for j in range(n):
                table[i, j] = dense_counts[start[i] : start[i + 1], start[j] : start[j + 1]].sum()
    table += 0.5
    bigram = table / table.sum(axis=1, keepdims=True)
    w = model.backoff_weight
    bits, symbols = 0.0, 0
    for x in sequences:
        alpha = np.asarray(model.pi, dtype=np.float64)[start[x[0]] : start[x[0] + 1]]
        for k, s in enumerate(x):
            if k > 0:
                prev = x[k - 1]
                alpha = alpha @ T[start[prev] : start[prev + 1], start[s] : start[s + 1]]
            p = alpha.sum()
            q = 1.0 / n if k == 0 else bigram[x[k - 1], s]
            bits -= np.log2((1 - w) * p + w * q)
            alpha = alpha / p if p > 0 else np.full(start[s + 1] - start[s], 1.0 / (start[s + 1] - start[s]))
            symbols += 1
    return bits / symbols


def small_options(**changes: object) -> api.TrainOptions:
    """A training of a few seconds: batch EM, nothing chosen on validation."""
    settings: dict = {"states": 60, "algorithm": "em", "pseudocount": 1e-6, "iterations": 3}
    return api.TrainOptions(**(settings | changes))


@pytest.fixture(scope="module")
def trained() -> TrainOutcome:
    return api.train_text(BLAKE.read_text(encoding="utf-8"), small_options())


def run_cli(args: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_model_saved_without_statistics_scores_as_with_them(trained, tmp_path: Path) -> None:
    """Without the per-entry counts the file keeps their sums per block (pair_counts): the same BPS as the model
    with counts and as the float64 reference, dense and pruned; the counts member is gone."""
    model = trained.model
    test = trained.corpus.test_parts
    for form, kept in (("dense", model), ("pruned", saving.prune_for_saving(model, 1e-2))):
        with_counts, without = tmp_path / f"{form}-counts.npz", tmp_path / f"{form}.npz"
        api.save_model(kept, with_counts)
        api.save_model(kept.without_statistics(), without)
        members = set(zipfile.ZipFile(without).namelist())
        assert "counts.npy" not in members and "pair_counts.npy" in members
        a, b = api.load_model(with_counts), api.load_model(without)
        assert b.counts is None and a.pair_counts is None
        bps_a = sequences_bps(a, test, "cpu")
        bps_b = sequences_bps(b, test, "cpu")
        assert bps_b == pytest.approx(bps_a, rel=1e-12, abs=1e-12)
        assert bps_b == pytest.approx(reference_bps(kept, test, kept.counts), rel=1e-9)
        # what scoring would give without the sums: the uniform back-off (different for the pruned model)
        assert reference_bps(kept, test, None) != pytest.approx(bps_b, rel=1e-12) or form == "dense"


def test_the_rule_keeps_dense_when_every_threshold_costs_more_than_the_bound() -> None:
    """A constructed lossy case: every clone goes to the clones of "a" and "b" with entries of 0.055 and to those
    of "c" with entries of 0.015, and the validation text has as many c's as a's and b's; each threshold tried
    (above 0.015) takes away every way to "c", so T stays dense, and each cost is the float64 reference's."""
    rng = np.random.default_rng(3)
    symbols = ["a", "b", "c"]
    pairs = np.array([(i, j) for i in range(3) for j in range(3)])
    model = random_model(symbols, np.array([8, 8, 8]), pairs, rng, dtype=np.float64)
    for k, (_, j) in enumerate(model.layout.block_pairs):
        model.T[model.layout.block_offset[k] : model.layout.block_offset[k + 1]] = 0.055 if j < 2 else 0.015
    x = rng.integers(3, size=400)
    thresholds = (0.02, 0.03)
    choice = saving.choose_threshold(model, [x], bound=0.002, thresholds=thresholds)
    assert choice.threshold is None and choice.cost == 0.0
    assert [row["threshold"] for row in choice.tried] == sorted(thresholds, reverse=True)
    baseline = reference_bps(model, [x], None)
    assert choice.baseline_bps == pytest.approx(baseline, rel=1e-9)
    for row in choice.tried:
        pruned = saving.prune_for_saving(model, row["threshold"])
        assert row["cost"] == pytest.approx(reference_bps(pruned, [x], None) - baseline, rel=1e-6, abs=1e-12)
        assert row["cost"] > 0.002


def test_the_rule_keeps_the_largest_threshold_within_the_bound(trained) -> None:
    """Tried largest first, the first threshold within the bound is kept: every larger one costs more than the
    bound, and the kept one's cost is the float64 reference's; bound 0 tries nothing."""
    model, validation = trained.selected, trained.corpus.validation_parts
    thresholds = (1e-4, 1e-3, 1e-2, 5e-2, 2e-1)
    baseline = reference_bps(model, validation, model.counts)
    costs = {}
    for threshold in thresholds:
        pruned = saving.prune_for_saving(model, threshold)
        costs[threshold] = reference_bps(pruned, validation, pruned.counts) - baseline
    bound = sorted(costs.values())[2] + 1e-9  # some thresholds within it, some not
    expected = max(t for t in thresholds if costs[t] <= bound)
    choice = saving.choose_threshold(model, validation, bound, thresholds=thresholds)
    assert choice.threshold == expected
    assert choice.cost == pytest.approx(costs[expected], rel=1e-6, abs=1e-9)
    assert all(costs[t] > bound for t in thresholds if t > expected)
    assert saving.choose_threshold(model, validation, 0.0).threshold is None


def test_train_prunes_when_lossless_and_the_file_scores_as_reported(tmp_path: Path, capsys) -> None:
    """On a text that repeats, pruning is lossless: ``chmm train`` keeps a threshold, says so, and (without a refit,
    so the saved model is the one measured) the file's validation BPS is the one it reported; the counts are
    left out unless --keep-statistics."""
    corpus = tmp_path / "repeated.txt"
    corpus.write_text(REPEATED, encoding="utf-8")
    out_path = tmp_path / "m.npz"
    args = ["train", corpus, "-o", out_path, "--states", "40", *FIXED, "--iterations", "20", "--no-refit"]
    code, out, _ = run_cli([*args, "--quiet", "--json"], capsys)
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    saved = summary["saved"]
    assert (
        saved["threshold"] == max(api.CHOICES.PRUNE_THRESHOLDS) and saved["validation_cost"] <= api.DEFAULTS.PRUNE_BOUND
    )
    model = load(out_path)
    assert model.counts is None and model.pair_counts is not None and not model.fixed_zeros
    assert model.metadata["saved"]["threshold"] == saved["threshold"]
    assert model.metadata["pruned"]["threshold"] == saved["threshold"]
    split = prepare_training_corpus(REPEATED, api.TrainOptions(), "repeated", model)
    bps = sequences_bps(model, split.validation_parts, "cpu")
    assert bps == pytest.approx(saved["validation_bps_dense"] + saved["validation_cost"], rel=1e-12)
    assert bps == pytest.approx(summary["validation_bps"], rel=1e-12)
    assert bps == pytest.approx(model.metadata["validation_bps"], rel=1e-12)
    code, out, _ = run_cli([*args, "--quiet", "--keep-statistics"], capsys)
    assert code == 0 and "T pruned at 0.001" in out and "saved with the expected counts" in out
    assert load(out_path).counts is not None
    code, out, _ = run_cli([*args, "--quiet", "--prune-bound", "0"], capsys)
    assert "T saved dense (--prune-bound 0)" in out
    assert "pruned" not in load(out_path).metadata


def test_continuing_from_a_file_without_statistics_is_continuing_in_memory(trained, tmp_path: Path) -> None:
    """--init reads no counts: a model saved without them (T dense) continues to the same T, bit for bit, as the
    in-memory model with its counts."""
    path = tmp_path / "m.npz"
    api.save_model(trained.model.without_statistics(), path)
    text = (DATA / "carroll-alice.txt").read_text(encoding="utf-8")[:20_000]
    options = small_options(states=api.CHOICES.AUTO, iterations=2)
    from_file = api.train_text(text, api.TrainOptions(**{**options.__dict__, "init": str(path)}))
    in_memory = api.train_text(text, options, initial_model=trained.model)
    np.testing.assert_array_equal(from_file.model.T, in_memory.model.T)
    np.testing.assert_array_equal(from_file.model.pi, in_memory.model.pi)
    assert from_file.summary["test_bps"] == in_memory.summary["test_bps"]


def test_continuing_a_model_pruned_for_saving_continues_it_dense(trained, tmp_path: Path, capsys) -> None:
    """A model pruned for saving continues as a dense model: its zeroed entries come back from the pseudocount, it
    backs off as an unpruned model and the continued file shows no pruning it does not have."""
    pruned = saving.prune_for_saving(trained.model, 1e-2).without_statistics()
    assert np.any(pruned.T == 0) and pruned.backoff_weight > BACKOFF_WEIGHT
    path, out_path = tmp_path / "pruned.npz", tmp_path / "continued.npz"
    api.save_model(pruned, path)
    args = ["train", BLAKE, "-o", out_path, "--init", path, "--iterations", "2", "--prune-bound", "0", "--quiet"]
    code, _, _ = run_cli(args, capsys)
    assert code == 0
    after = load(out_path)
    assert after.backoff_weight == BACKOFF_WEIGHT and not after.fixed_zeros
    assert "pruned" not in after.metadata
    layout: BlockLayout = after.layout
    for i, j in pruned.layout.block_pairs:
        k_after = layout.find_block(i, j)
        block = after.T[layout.block_offset[k_after] : layout.block_offset[k_after + 1]]
        assert np.all(block > 0)  # the pseudocount reached every stored entry


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prune-bound", "-1"], "the prune bound must be a number of bits per symbol"),
        (["--prune-bound", "nan"], "the prune bound must be a number of bits per symbol"),
        (["--learner", "ngram", "--keep-statistics"], "apply to CHMMs only"),
    ],
)
def test_bad_prune_settings_are_one_sentence(extra: list[str], message: str, tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(["train", BLAKE, "-o", tmp_path / "m.npz", *extra], capsys)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.npz").exists()


def test_pruning_a_model_without_counts_keeps_the_sums_of_the_blocks_that_stay(trained) -> None:
    """``chmm prune`` on a file without counts: the pair counts of the blocks that stay, each the sum of the
    counts the model had over that block (the back-off bigram of the blocks kept)."""
    model = trained.model
    pruned = saving.prune_for_saving(model.without_statistics(), 5e-2)
    assert pruned.counts is None and pruned.layout.n_blocks < model.layout.n_blocks
    dense_counts = model.with_arrays(T=model.counts, counts=None).dense_T()
    start = model.layout.clone_start
    for k, (i, j) in enumerate(pruned.layout.block_pairs):
        expected = dense_counts[start[i] : start[i + 1], start[j] : start[j + 1]].sum()
        assert pruned.pair_counts[k] == pytest.approx(expected, rel=1e-12)
