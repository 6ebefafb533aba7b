"""Symbols beyond characters: the unit of a corpus and of a model (characters, words, tokens), sequences from lines
and CSV event logs split by sequence, the back-off that gives pairs never seen in training their due (every row a
distribution, every sequence's probabilities summing to one, the same on every implementation), token sequences
from memory, and one-sentence refusals of bad input."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from engine import api
from engine.backends import engines
from engine.backends.cpu import inference, sparse
from engine.corpora import sequences, text
from engine.model.backoff import Backoff, choose_weight
from engine.model.codec import TextCodec
from engine.model.dense import random_model

TALE = (
    "The cat sat on the mat. The dog sat on the log. 42 cats and 7 dogs! The cat saw the dog; the dog saw the cat. "
) * 12


# ------------------------------------------------------------------------------------------------ units
@pytest.mark.parametrize("unit", text.UNITS)
def test_each_unit_round_trips_text_to_ids_to_text(unit: str) -> None:
    corpus = text.prepare_corpus(TALE, unit=unit, normalisation="raw")
    for part, ids in ((corpus.train_text, corpus.train), (corpus.test_text, corpus.test)):
        assert corpus.decode(ids) == (part if unit == "characters" else " ".join(part.split()))
        np.testing.assert_array_equal(corpus.encode(corpus.decode(ids)), ids)
    if unit == "words":  # the paper's normalisation at word level: lowercase, numbers written out
        assert "forty" in corpus.symbols and "two" in corpus.symbols and "The" not in corpus.symbols
    if unit == "tokens":  # as given: case and punctuation kept
        assert "The" in corpus.symbols and "mat." in corpus.symbols


def test_words_under_the_minimum_count_become_one_rare_symbol() -> None:
    raw = "a b a b a b c d a b a b a b a b a b e"
    corpus = text.prepare_corpus(raw, unit="words", test_fraction=0.0, validation=0.1)
    assert corpus.symbols == ["a", "b", text.RARE_TOKEN]
    assert corpus.vocabulary == ["a", "b"]
    assert "c" not in corpus.decode(corpus.train) and text.RARE_TOKEN in corpus.decode(corpus.train)
    kept = text.prepare_corpus(raw, unit="words", test_fraction=0.0, validation=0.1, min_count=1)
    assert {"c", "d"} <= set(kept.symbols)


def test_a_word_model_keeps_its_unit_through_its_file(tmp_path) -> None:
    corpus = text.prepare_corpus(TALE, unit="words")
    codec = TextCodec(corpus.normalisation, tuple(corpus.vocabulary), "words")
    model = random_model(corpus.symbols, np.full(corpus.n_symbols, 2), _pairs(corpus), np.random.default_rng(0),
                         codec=codec)  # fmt: skip
    path = tmp_path / "words.npz"
    api.save_model(model, path)
    loaded = api.load_model(path)
    assert loaded.codec == codec and loaded.symbols == corpus.symbols
    ids = api.encode_for_model(loaded, "The CAT sat on the zebra")
    assert loaded.decode_symbols(ids) == f"the cat sat on the {text.RARE_TOKEN}"


def test_a_character_model_file_keeps_the_form_it_always_had() -> None:
    """Nothing of a character model's file changes: its codec is written without a unit, as before."""
    assert TextCodec("paper", ("a",)).to_json() == {"normalisation": "paper", "vocabulary": ["a"]}
    assert TextCodec.from_json({"normalisation": "raw", "vocabulary": None}).unit == "characters"


def _pairs(corpus: text.Corpus) -> np.ndarray:
    from engine.training.stages import corpus_pairs

    return corpus_pairs(corpus)


# ------------------------------------------------------------------------------------------------ sequences
def test_lines_are_split_by_sequence_the_last_tenth_for_the_test() -> None:
    lines = [f"s{n} go {'left' if n % 2 else 'right'} stop" for n in range(40)]
    documents = sequences.read_lines("\n".join(lines) + "\n\n")
    corpus = text.prepare_corpus(documents, unit="tokens", by_sequence=True, min_count=1)
    assert len(corpus.test_parts) == 4 and len(corpus.validation_parts) == 4 and len(corpus.train_parts) == 32
    assert corpus.documents[-4:] == ["corpus:37", "corpus:38", "corpus:39", "corpus:40"]
    assert corpus.decode(corpus.test_parts[-1]).split()[1:] == ["go", "left", "stop"]


def test_an_event_log_is_read_by_case_in_the_order_column() -> None:
    raw = "case,activity,time\n1,pay,3\n2,open,1\n1,open,1\n1,check items,2\n2,close,10\n2,check items,9\n"
    cases = sequences.read_event_log(raw, "case", "activity", "time")
    assert [(c.name, c.text) for c in cases] == [("1", "open check_items pay"), ("2", "open check_items close")]
    dated = "id,act,at\nb,x,2026-01-02T10:00\nb,y,2026-01-01T09:00\n"
    assert sequences.read_event_log(dated, "id", "act", "at")[0].text == "y x"


@pytest.mark.parametrize(
    "raw, columns, message",
    [
        ("case,activity\n1,a\n", ("case", "event"), "has no column 'event'; its columns are 'case', 'activity'"),
        ("", ("case", "activity"), "has no header row"),
        ("case,activity\n", ("case", "activity"), "has a header but no rows"),
        ("case,activity\n1,\n", ("case", "activity"), "Row 2 of corpus has no 'activity' value"),
        ("case,activity,x\n1,a\n", ("case", "x"), "Row 2 of corpus has 2 cells"),
    ],
)
def test_a_bad_event_log_is_refused_in_one_sentence(raw: str, columns: tuple[str, str], message: str) -> None:
    with pytest.raises(text.CorpusError, match=message):
        sequences.read_event_log(raw, *columns)


def test_bad_corpora_of_other_units_are_refused_in_one_sentence() -> None:
    with pytest.raises(text.CorpusError, match="contains only the symbol 'go'.*at least two distinct"):
        text.prepare_corpus("go go go go go go go", unit="tokens")
    with pytest.raises(text.CorpusError, match="Unknown unit 'bytes'; choose one of characters, words, tokens"):
        text.prepare_corpus(TALE, unit="bytes")
    with pytest.raises(text.CorpusError, match="minimum count must be an integer of at least 1"):
        text.prepare_corpus(TALE, unit="words", min_count=0)
    with pytest.raises(text.CorpusError, match="has 2 sequence\\(s\\), too few"):
        text.prepare_corpus(sequences.read_lines("a b\nc d"), unit="tokens", by_sequence=True)
    with pytest.raises(text.CorpusError, match="Sequence 1 has the token 'a b'"):
        sequences.sequences_from_tokens([["a"], ["a b"]])


def test_a_vocabulary_past_the_limit_and_a_model_past_the_memory_are_refused(monkeypatch) -> None:
    monkeypatch.setattr(text, "MAX_SYMBOLS", 10)
    with pytest.raises(text.CorpusError, match=r"has 1\d distinct words seen at least 2 time\(s\), more than the 10"):
        text.prepare_corpus(TALE, unit="words")
    monkeypatch.undo()
    options = api.TrainOptions(unit="words", states=5_000, pseudocount=0.01, max_memory=1_000)
    with pytest.raises(ValueError, match="5,000 states would need about .* GiB to train on this corpus, more than"):
        api.train_text(TALE, options)


# ------------------------------------------------------------------------------------------------ back-off
def _tiny_token_model(kind_unit: str, seed: int = 0):
    """A model of 3 symbols and 2 clones each whose blocks miss some pairs, with expected counts on its blocks."""
    rng = np.random.default_rng(seed)
    pairs = np.array([(0, 0), (0, 1), (1, 2), (2, 0), (2, 1)])
    codec = TextCodec(text.UNIT_NORMALISATION.get(kind_unit, "raw"), None, kind_unit)
    model = random_model(["a", "b", "c"], np.array([2, 1, 2]), pairs, rng, np.float64, codec=codec)
    counts = rng.integers(1, 5, size=model.layout.size).astype(np.float64)
    counts[:2] = 0.0  # a block with no count: its pair's weight falls to the rest of the row
    return model.with_arrays(counts=counts, backoff_weight=0.3)


@pytest.mark.parametrize("unit", ["characters", "words"])
def test_every_backoff_row_is_a_distribution(unit: str) -> None:
    model = _tiny_token_model(unit)
    table = inference.model_backoff(model)
    assert table.kind == ("bigram" if unit == "characters" else "kneser-ney")
    for i in range(model.n_symbols):
        row = table.row(i)
        assert np.all(row > 0) and row.sum() == pytest.approx(1.0, abs=1e-12)
    start = table.sequence(np.arange(3))[0]
    assert start > 0
    empty = Backoff.build(model.layout, None, table.kind)  # no counts kept: still distributions
    assert all(empty.row(i).sum() == pytest.approx(1.0, abs=1e-12) for i in range(3))


@pytest.mark.parametrize("unit", ["characters", "tokens"])
@pytest.mark.parametrize("implementation", ["dense", "sparse", "gpu-sim"])
def test_the_scores_of_all_sequences_of_a_length_sum_to_one(unit: str, implementation: str) -> None:
    """Brute force: with the back-off, P(x) over every sequence of length 4 (pairs without a block included) sums to
    one, on the dense and sparse CPU implementations and the GPU engine's simulated device alike."""
    model = _tiny_token_model(unit, seed=3)
    if implementation == "sparse":
        engine = engines.engine_for(sparse.from_dense(model))
        state = engine.load(sparse.from_dense(model))
    else:
        engine = engines.engine_for(model, "cpu" if implementation == "dense" else implementation)
        state = engine.load(model)
    total = 0.0
    for x in itertools.product(range(3), repeat=4):
        total += 2.0 ** engine.score(state, np.array(x)).log2_probability
    assert total == pytest.approx(1.0, abs=1e-9 if implementation != "gpu-sim" else 1e-6)  # float32 passes there
    x = np.array([0, 1, 1, 2, 2, 2, 0])  # (1, 1) and twice (2, 2): no block
    reference = inference.score(model, x)
    assert engine.score(state, x).bps == pytest.approx(reference.bps, rel=1e-6)
    assert reference.zero_probability_events == 3


def test_the_backoff_weight_is_the_maximum_of_the_validation_likelihood() -> None:
    rng = np.random.default_rng(1)
    p = np.where(rng.random(500) < 0.4, 0.0, rng.random(500))
    q = rng.random(500) * 0.1 + 1e-3
    chosen = choose_weight(p, q)
    grid = np.linspace(1e-6, 0.999, 20001)
    values = [np.sum(np.log((1 - w) * p + w * q)) for w in grid]
    assert chosen == pytest.approx(grid[int(np.argmax(values))], abs=1e-3)
    assert choose_weight(np.ones(10), np.full(10, 0.1)) == pytest.approx(1e-6)  # the CHMM alone is best


# ------------------------------------------------------------------------------------------------ training
def test_a_word_model_is_trained_scored_and_beside_the_ngram_on_the_same_tokens(tmp_path) -> None:
    options = api.TrainOptions(unit="words", states=120, pseudocount=0.01, iterations=5, algorithm="em")
    outcome = api.train_text(TALE * 3, options)
    model = outcome.model
    assert model.codec.unit == "words" and model.symbols[-1] == text.RARE_TOKEN
    assert 1e-6 <= model.backoff_weight <= 0.999
    # the back-off reads the exact pair counts of the text the model was refitted on, one per stored block
    corpus = text.prepare_corpus(TALE * 3, unit="words")
    x = corpus.train_full
    brute = {}
    for i, j in zip(x[:-1], x[1:], strict=True):
        brute[(int(i), int(j))] = brute.get((int(i), int(j)), 0) + 1
    stored = {(int(i), int(j)): c for (i, j), c in zip(model.layout.block_pairs, model.pair_counts, strict=True)}
    assert stored == brute and model.counts is None
    assert outcome.summary["test_bps"] is not None and np.isfinite(outcome.summary["test_bps"])
    beside = api.learners.ngram_beside(TALE * 3, options, model.codec.normalisation)
    assert np.isfinite(beside["test_bps"])
    again = api.score_text(model, "the cat sat on the unicorn")  # an unseen word and pair: finite
    assert np.isfinite(again.bps)


def test_token_sequences_from_memory_train_and_score() -> None:
    rng = np.random.default_rng(0)
    cases = [["open", *(["work"] * int(rng.integers(1, 4))), "close"] for _ in range(60)]
    options = api.TrainOptions(states=12, pseudocount=0.01, iterations=10, algorithm="em", min_count=1)
    outcome = api.train_tokens(cases, options=options)
    assert outcome.model.codec.unit == "tokens" and len(outcome.model.symbols) == 4
    scored = api.score_tokens(outcome.model, cases[-6:])
    ids = {s: i for i, s in enumerate(["open", "work", "close"])}
    flat = np.array([ids[t] for case in cases for t in case])
    lengths = [len(c) for c in cases]
    from_arrays = api.train_tokens(flat, lengths, options=options)
    assert sorted(from_arrays.model.symbols) == sorted(["0", "1", "2", text.RARE_TOKEN])
    assert scored.symbols == sum(len(c) for c in cases[-6:]) and np.isfinite(scored.bps)
    with pytest.raises(text.CorpusError, match="lengths must be positive and add up"):
        api.train_tokens(flat, [3, 4], options=options)


def test_the_command_line_trains_on_an_event_log(tmp_path, capsys) -> None:
    from engine.cli import main

    rows = ["case,activity,t"] + [
        f"{c},{a},{k}" for c in range(40) for k, a in reversed(list(enumerate(["open", "check", "pay", "close"])))
    ]
    log = tmp_path / "log.csv"
    log.write_text("\n".join(rows) + "\n")
    out = tmp_path / "log.npz"
    columns = ["--sequence-column", "case", "--token-column", "activity", "--order-column", "t"]
    args = ["train", str(log), "-o", str(out), "--format", "csv", *columns, "--states", "8", "--pseudocount", "0.01"]
    args += ["--quiet", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["unit"] == "tokens" and summary["test_bps"] < 0.1  # the cases are deterministic
    assert api.load_model(out).codec.unit == "tokens"
    cases = tmp_path / "cases.txt"
    cases.write_text("open check pay close\n" * 3)
    assert main(["score", str(out), str(cases)]) == 0
    assert capsys.readouterr().out.endswith("bits per token over 12 tokens\n")
    assert main(["train", str(log), "-o", str(out), "--format", "csv", "--token-column", "activity"]) == 1
    assert "needs the CSV's --sequence-column and --token-column" in capsys.readouterr().err
    again = ["train", str(log), "-o", str(tmp_path / "again.npz"), "--init", str(out), "--unit", "words"]
    assert main(again) == 1
    assert "the model to continue reads tokens, not words: leave out the unit" in capsys.readouterr().err
    assert main(["train", str(log), "-o", str(out), "--format", "csv", "--unit", "characters", *columns]) == 1
    assert "a CSV event log holds one token per row" in capsys.readouterr().err
    assert main(["train", str(log), "-o", str(out), "--format", "csv", "--token-column", "activity"]) == 1
    assert "needs the CSV's --sequence-column and --token-column" in capsys.readouterr().err


@pytest.mark.parametrize("implementation", ["dense", "sparse", "gpu-sim"])
def test_em_on_a_token_model_never_lowers_the_likelihood(implementation: str) -> None:
    """The back-off enters scoring, not EM: batch EM on a word model's training text raises its likelihood at every
    iteration on every implementation, each figure the dense forward pass's own for the model before the step."""
    from engine.training import learning

    corpus = text.prepare_corpus(TALE, unit="words")
    model = random_model(corpus.symbols, np.full(corpus.n_symbols, 2), _pairs(corpus), np.random.default_rng(2),
                         np.float64, codec=TextCodec("paper", tuple(corpus.vocabulary), "words"))  # fmt: skip
    if implementation == "sparse":
        model = sparse.from_dense(model)
    backend = "gpu-sim" if implementation == "gpu-sim" else "cpu"
    config = learning.TrainingConfig(pseudocount=0.0)
    x = corpus.train_full
    previous = -np.inf
    for _ in range(6):
        before = model
        model, log_likelihood = learning.em_iteration(model, x, config, backend)
        reference = inference.log_likelihood(before if implementation != "sparse" else before.to_dense(), x)
        assert log_likelihood == pytest.approx(reference, rel=1e-5)  # the likelihood of the model before the step
        assert log_likelihood >= previous - 1e-6 * abs(previous if np.isfinite(previous) else 1.0)
        previous = log_likelihood


def test_the_e_step_of_many_short_sequences_is_the_sum_of_theirs() -> None:
    """Many sentences share one transposition of T and add their counts block by block: the same counts, gamma(1)
    and likelihood as each sequence's own E-step on a fresh engine, summed."""
    rng = np.random.default_rng(5)
    corpus = text.prepare_corpus(sequences.read_lines(TALE.replace(". ", ".\n")), unit="words", by_sequence=True)
    model = random_model(corpus.symbols, np.full(corpus.n_symbols, 3), _pairs(corpus), rng, np.float64,
                         codec=TextCodec("paper", tuple(corpus.vocabulary), "words"))  # fmt: skip
    parts = [x for x in corpus.train_parts if len(x) >= 2]
    engine = engines.engine_for(model)
    together = engines.e_step_sequences(engine, engine.load(model), parts)
    alone = [inference.e_step(model, x) for x in parts]
    np.testing.assert_allclose(together.counts, sum(e.counts for e in alone), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(together.gamma_first, sum(e.gamma_first for e in alone) / len(parts), rtol=1e-12)
    assert together.log_likelihood == pytest.approx(sum(e.log_likelihood for e in alone), rel=1e-12)
    assert len(parts) > 20


def test_word_candidates_are_the_vocabulary_plus_the_grid_within_the_memory_given() -> None:
    from dataclasses import replace

    from engine.training.options import estimate_training_memory, states_candidates

    corpus = text.prepare_corpus(TALE * 40, unit="words")
    every = states_candidates(corpus, api.TrainOptions(unit="words", max_memory=2**40))
    assert every[0] == corpus.n_symbols + api.CHOICES.STATES_GRID[0] and every == sorted(every) and len(every) >= 2
    assert all(n - corpus.n_symbols in api.CHOICES.STATES_GRID for n in every)
    options = api.TrainOptions(unit="words", max_memory=estimate_training_memory(
        corpus, api.TrainOptions(unit="words", states=every[0], pseudocount=0.01)))  # fmt: skip
    fitting = states_candidates(corpus, options)
    assert fitting == every[:1]
    assert all(estimate_training_memory(corpus, replace(options, states=n)) <= options.max_memory for n in fitting)
