"""Decoding scrambled text (paper, section 4.2.2): scrambling, the uncertain-evidence encoding, unconstrained and
permutation-constrained MAP decoding against brute force, memorised-text round trips, errors and `chmm decode`."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engine import api, cli, training
from engine.backends import model_files, scramble
from engine.backends.cpu import inference
from engine.corpora.text import PAPER_SYMBOLS, normalise_paper_base
from engine.model.dense import CHMM, random_model

MEMORISED = (
    "The quick brown fox jumps over the lazy dog, while seven wizards quietly hexed the jumbled letters; "
    "a grumpy sphinx judged every crazy vow. "
)


# ----------------------------------------------------------------------------------------------- fixtures
def train_memorised(normalisation: str) -> CHMM:
    """A CHMM that has memorised MEMORISED (repeated 20 times; every word is seen often, so nothing is rare)."""
    options = training.TrainOptions(
        algorithm="em",
        pseudocount=1e-6,
        states=320,
        allocation="frequency",
        normalisation=normalisation,
        iterations=60,
        validation=0.0,
        test_fraction=0.0,
        refit=False,
        seed=0,
    )
    return training.train_text(MEMORISED * 20, options).model


@pytest.fixture(scope="module")
def raw_model() -> CHMM:
    return train_memorised("raw")


@pytest.fixture(scope="module")
def paper_model() -> CHMM:
    return train_memorised("paper")


def letter_model(symbols: str, seed: int, clones: int = 2, pairs: list[tuple[int, int]] | None = None) -> CHMM:
    """A random float64 CHMM over ``symbols`` (all symbol pairs stored unless ``pairs`` is given)."""
    rng = np.random.default_rng(seed)
    n = len(symbols)
    if pairs is None:
        pairs = [(i, j) for i in range(n) for j in range(n)]
    n_clones = rng.integers(1, clones + 1, size=n)
    model = random_model(list(symbols), n_clones, np.array(pairs), rng, dtype=np.float64)
    model.metadata = {"normalisation": "raw"}
    return model


def words(s: str) -> list[str]:
    return [s[a:b] for a, b in scramble.word_spans(s)]


# ----------------------------------------------------------------------------------------------- scrambling
@pytest.mark.parametrize("seed", range(5))
def test_scramble_keeps_first_last_lengths_and_letters(seed: int) -> None:
    rng = np.random.default_rng(seed)
    original = "according to a researcher at cambridge university, it doesn't matter in what order... x1 yes!"
    scrambled = scramble.scramble_text(original, rng)
    assert len(scrambled) == len(original)
    assert [c for c in scrambled if not c.isalpha()] == [c for c in original if not c.isalpha()]
    assert scramble.word_spans(scrambled) == scramble.word_spans(original)
    for a, b in zip(words(original), words(scrambled), strict=True):
        assert (a[0], a[-1], len(a)) == (b[0], b[-1], len(b))
        assert Counter(a[1:-1]) == Counter(b[1:-1])


def test_scramble_permutes_long_interiors_and_leaves_short_words() -> None:
    rng = np.random.default_rng(0)
    original = "a an the internationalisation"
    outputs = {scramble.scramble_text(original, rng) for _ in range(20)}
    assert all(o.startswith("a an the i") and o.endswith("n") for o in outputs)
    assert len(outputs) > 1


def test_restoration_counts_words_and_characters() -> None:
    figures = scramble.restoration("the cat sat, mostly", "the cta sat, mostyl")
    assert figures == scramble.Restoration(words_restored=2, words=4, characters_restored=15, characters=19)
    assert scramble.restoration("word", "word") == scramble.Restoration(1, 1, 4, 4)
    with pytest.raises(ValueError, match="differ in length"):
        scramble.restoration("word", "words")


# ----------------------------------------------------------------------------------------------- evidence
def test_evidence_ltteers() -> None:
    model = letter_model("".join(PAPER_SYMBOLS), seed=0)
    index = model.symbol_index()
    evidence = scramble.scramble_evidence(model, "ltteers")
    assert list(np.diff(evidence.ptr)) == [1, 3, 3, 3, 3, 3, 1]
    for n in range(7):
        got = {
            int(s): float(w)
            for s, w in zip(
                evidence.symbol[evidence.ptr[n] : evidence.ptr[n + 1]],
                evidence.weight[evidence.ptr[n] : evidence.ptr[n + 1]],
                strict=True,
            )
        }
        if n in (0, 6):
            assert got == {index["ltteers"[n]]: 1.0}
        else:
            assert got == pytest.approx({index["t"]: 2 / 5, index["e"]: 2 / 5, index["r"]: 1 / 5})


def test_evidence_certain_outside_word_interiors() -> None:
    model = letter_model("abcdeo ,", seed=0)
    evidence = scramble.scramble_evidence(model, "abc, bdca ooo")
    sizes = list(np.diff(evidence.ptr))
    # "abc" has a one-letter interior, "bdca" interior {d, c}, "ooo" one letter: only positions 6 and 7 uncertain
    assert sizes == [1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1, 1]
    assert np.allclose(evidence.weight[evidence.ptr[6] : evidence.ptr[7]], [0.5, 0.5])
    hard = [evidence.symbol[evidence.ptr[n]] for n in range(13) if sizes[n] == 1]
    assert "".join(model.symbols[s] for s in hard) == "abc, ba ooo"


# ------------------------------------------------------------------------------------------ decoding vs brute force
def brute_force_decode(model: CHMM, scrambled: str, constrained: bool) -> tuple[str, float]:
    """max over every candidate text of P(best clone path | text) x evidence weights, by enumeration."""
    spans = [(a, b) for a, b in scramble.word_spans(scrambled) if b - a >= 4]
    choices = []
    for a, b in spans:
        interior = scrambled[a + 1 : b - 1]
        if constrained:
            choices.append(sorted({"".join(p) for p in itertools.permutations(interior)}))
        else:
            choices.append(["".join(p) for p in itertools.product(sorted(set(interior)), repeat=len(interior))])
    best, best_text = -np.inf, ""
    for combo in itertools.product(*choices):
        chars = list(scrambled)
        log_weight = 0.0
        for (a, b), filled in zip(spans, combo, strict=True):
            chars[a + 1 : b - 1] = filled
            counts = Counter(scrambled[a + 1 : b - 1])
            log_weight += sum(np.log(counts[c] / (b - a - 2)) for c in filled)
        candidate = "".join(chars)
        lp = inference.viterbi(model, model.encode(candidate)).log_probability + log_weight
        if lp > best + 1e-12:
            best, best_text = lp, candidate
    return best_text, best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("constrained", [False, True])
def test_decoding_matches_brute_force(seed: int, constrained: bool) -> None:
    model = letter_model("abcd ", seed=seed, clones=3)
    rng = np.random.default_rng(seed)
    scrambled = "".join(rng.choice(list("abcd"), size=5)) + " " + "".join(rng.choice(list("abcd"), size=4))
    expected, expected_lp = brute_force_decode(model, scrambled, constrained)
    result = scramble.decode_scrambled(model, scrambled, constrained=constrained)
    assert result.log_probability == pytest.approx(expected_lp, rel=1e-9)
    assert result.decoded == expected
    if constrained:
        for a, b in zip(words(scrambled), words(result.decoded), strict=True):
            assert Counter(a[1:-1]) == Counter(b[1:-1]) and (a[0], a[-1]) == (b[0], b[-1])


def test_relaxed_lattice_equals_engine_viterbi() -> None:
    model = letter_model("abcdefg ", seed=3, clones=3)
    scrambled = "abcdefg gfedcba bcdefga"
    evidence = scramble.scramble_evidence(model, scrambled)
    engine_result = inference.viterbi(model, evidence)
    result = scramble.decode_scrambled(model, scrambled, constrained=True, max_subsets=1)
    assert result.relaxed_words == 3
    assert result.log_probability == pytest.approx(engine_result.log_probability, rel=1e-12)
    assert result.decoded == model.decode_symbols(engine_result.symbols)


# ----------------------------------------------------------------------------------------------- memorised text
@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_memorised_text_round_trip_raw(raw_model: CHMM, constrained: bool, seed: int) -> None:
    scrambled = scramble.scramble_text(MEMORISED, np.random.default_rng(seed))
    assert scrambled != MEMORISED
    result = scramble.decode_scrambled(raw_model, scrambled, constrained=constrained)
    assert result.decoded == MEMORISED
    assert result.scrambled == scrambled
    assert result.changed == scramble.changed_positions(scrambled, MEMORISED)
    assert np.isfinite(result.log_probability) and result.unresolved_words == 0


@pytest.mark.parametrize("constrained", [False, True])
def test_memorised_text_round_trip_paper(paper_model: CHMM, constrained: bool) -> None:
    scrambled = scramble.scramble_text(MEMORISED, np.random.default_rng(7))
    result = api.decode_text(paper_model, scrambled, constrained=constrained)
    assert result.decoded == normalise_paper_base(MEMORISED)
    assert result.scrambled == scramble.normalise_for_decoding(paper_model, scrambled)


def test_impossible_word_is_kept_and_the_rest_decoded(raw_model: CHMM) -> None:
    # "qzxj" has no possible decoding (the model never saw q followed by z or x or j)
    result = scramble.decode_scrambled(raw_model, "the bwron qzxj fox")
    assert result.log_probability == -np.inf
    assert result.decoded == "the brown qzxj fox"
    assert result.unresolved_words == 1


# ----------------------------------------------------------------------------------------------- marking and errors
def test_mark_changes() -> None:
    assert scramble.mark_changes("ltteers", "letters") == "l[e]t[t]ers"
    assert scramble.mark_changes("wrod", "word") == "w[or]d"
    assert scramble.mark_changes("abc", "abc") == "abc"
    assert scramble.mark_changes("ab cd", "ba dc", "<", ">") == "<ba> <dc>"
    assert scramble.change_spans("xaxbx", "yayby") == [(0, 1), (2, 3), (4, 5)]
    with pytest.raises(ValueError, match="differ in length"):
        scramble.mark_changes("ab", "abc")


def test_characters_outside_the_alphabet_are_named(raw_model: CHMM) -> None:
    with pytest.raises(ValueError, match=r"outside the model's alphabet.*'@'"):
        scramble.decode_scrambled(raw_model, "the bwron fox @ home")
    with pytest.raises(ValueError, match="outside the model's alphabet"):
        scramble.scramble_evidence(raw_model, "Zebra")
    with pytest.raises(ValueError, match="empty"):
        scramble.decode_scrambled(raw_model, "")


# ----------------------------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def model_file(raw_model: CHMM, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("decode") / "memorised.npz"
    model_files.save_model(raw_model, path)
    return path


@pytest.mark.parametrize("extra", [[], ["--constrained"]])
def test_cli_decode_json_round_trip(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    scrambled = scramble.scramble_text(MEMORISED, np.random.default_rng(3))
    source = tmp_path / "scrambled.txt"
    source.write_text(scrambled, encoding="utf-8")
    assert cli.main(["decode", str(model_file), str(source), "--json", *extra]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["decoded"] == MEMORISED
    assert figures["changed"] == scramble.changed_positions(scrambled, MEMORISED)
    assert cli.main(["decode", str(model_file), str(source)]) == 0
    assert capsys.readouterr().out == MEMORISED + "\n"


def test_cli_decode_errors(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "bad.txt"
    source.write_text("the bwron fox @ home", encoding="utf-8")
    assert cli.main(["decode", str(model_file), str(source), "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("chmm: error:") and "'@'" in captured.err and captured.err.count("\n") == 1
    assert cli.main(["decode", str(model_file), str(tmp_path / "missing.txt")]) == 1
    assert capsys.readouterr().err.startswith("chmm: error:")
