"""Tests for engine.corpora.text: reading, normalising and splitting corpora."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.corpora.text import (
    PAPER_SYMBOLS,
    Corpus,
    CorpusError,
    apply_normalisation,
    decode_bytes,
    normalise_paper_base,
    numbers_to_words,
    prepare_corpus,
    read_text,
)

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- decode_bytes


def test_decode_plain_utf8_and_bom() -> None:
    assert decode_bytes("héllo\n".encode()) == "héllo\n"
    assert decode_bytes(b"\xef\xbb\xbfabc") == "abc"


def test_decode_allows_text_control_characters() -> None:
    data = b"line one\tx\r\nline two\f\v\x1a end\n"
    assert decode_bytes(data) == data.decode()


def test_decode_too_large() -> None:
    with pytest.raises(CorpusError, match=r"big\.txt is too large: 11 bytes, the limit is 10 bytes"):
        decode_bytes(b"hello world", name="big.txt", max_bytes=10)


def test_decode_nul_bytes() -> None:
    with pytest.raises(CorpusError, match=r"x\.bin looks like a binary file.*NUL"):
        decode_bytes(b"some text\x00more\x00 text", name="x.bin")


def test_decode_tolerates_one_stray_nul() -> None:
    # Regression: calgary-book1.txt (one of the paper's data sets) holds a single NUL byte in 768,771.
    assert decode_bytes(b"a long text " * 1000 + b"\x00").startswith("a long text")


def test_decode_many_control_characters() -> None:
    data = b"abcdefghij" * 20 + b"\x01\x02\x03"  # 3 of 203 bytes: more than 1%
    with pytest.raises(CorpusError, match=r"looks like a binary file.*control characters"):
        decode_bytes(data, name="x.dat")
    ok = b"abcdefghij" * 20 + b"\x01"  # 1 of 201 bytes: under 1%
    assert decode_bytes(ok).startswith("abc")


def test_decode_invalid_utf8_reports_offset() -> None:
    with pytest.raises(CorpusError, match=r"latin\.txt is not valid UTF-8.*0xe9.*byte offset 3\b"):
        decode_bytes(b"caf\xe9 au lait", name="latin.txt")


def test_decode_empty_and_whitespace() -> None:
    with pytest.raises(CorpusError, match=r"e\.txt is empty"):
        decode_bytes(b"", name="e.txt")
    with pytest.raises(CorpusError, match=r"w\.txt contains only whitespace"):
        decode_bytes(b" \n\t\r\n ", name="w.txt")
    with pytest.raises(CorpusError, match=r"contains only whitespace"):
        decode_bytes(b"\xef\xbb\xbf\n")


# --------------------------------------------------------------------------- read_text


def test_read_text_ok(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_bytes(b"\xef\xbb\xbfHello\n")
    assert read_text(p) == "Hello\n"
    assert read_text(str(p)) == "Hello\n"


def test_read_text_missing(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nothere\.txt was not found"):
        read_text(tmp_path / "nothere.txt")


def test_read_text_directory(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"is a directory"):
        read_text(tmp_path)


def test_read_text_too_large(tmp_path: Path) -> None:
    p = tmp_path / "big.txt"
    p.write_bytes(b"x" * 100)
    with pytest.raises(CorpusError, match=r"big\.txt is too large: 100 bytes, the limit is 50 bytes"):
        read_text(p, max_bytes=50)


def test_read_text_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "locked.txt"
    p.write_text("hello")

    def deny(self: Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", deny)  # read_text opens the file and reads at most the limit from it
    with pytest.raises(CorpusError, match=r"locked\.txt cannot be read \(Permission denied\)"):
        read_text(p)


def test_read_text_binary_file_named(tmp_path: Path) -> None:
    p = tmp_path / "image.png"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(CorpusError, match=r"image\.png looks like a binary file"):
        read_text(p)


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("digits", "words"),
    [
        ("0", "zero"),
        ("7", "seven"),
        ("13", "thirteen"),
        ("20", "twenty"),
        ("42", "forty two"),
        ("100", "one hundred"),
        ("101", "one hundred one"),
        ("999", "nine hundred ninety nine"),
        ("1000", "one thousand"),
        ("1865", "one thousand eight hundred sixty five"),
        ("2019", "two thousand nineteen"),
        ("1000000", "one million"),
        ("1000001", "one million one"),
        ("123456789012", "one hundred twenty three billion four hundred fifty six million "
         "seven hundred eighty nine thousand twelve"),
        ("1234567890123", "one two three four five six seven eight nine zero one two three"),
        ("007", "zero zero seven"),
    ],
)  # fmt: skip
def test_numbers_to_words(digits: str, words: str) -> None:
    assert numbers_to_words(digits) == f" {words} "


def test_numbers_to_words_in_text() -> None:
    assert numbers_to_words("in 1865, 3 cats") == "in  one thousand eight hundred sixty five ,  three  cats"
    assert numbers_to_words("abc42def") == "abc forty two def"
    assert numbers_to_words("no digits") == "no digits"


# --------------------------------------------------------------------------- normalisation


def test_paper_base_normalisation() -> None:
    assert normalise_paper_base("Don't PANIC: 42 cats!") == "don t panic forty two cats"
    assert normalise_paper_base("  Café—naïve’s\n\n(résumé) ") == "cafe naive s resume"
    assert normalise_paper_base("Chapter 1.\nThe END") == "chapter one the end"
    assert normalise_paper_base("It's 'quoted'") == "it s quoted"
    assert normalise_paper_base("ﬁne") == "fine"
    assert normalise_paper_base("!!!") == ""


def test_paper_symbols() -> None:
    assert len(PAPER_SYMBOLS) == 27
    assert PAPER_SYMBOLS[0] == " "
    assert "".join(PAPER_SYMBOLS[1:]) == "abcdefghijklmnopqrstuvwxyz"


def test_apply_normalisation() -> None:
    assert apply_normalisation("The cat, the DOG.", "paper", ["cat", "the"]) == "the cat the rare"
    assert apply_normalisation("The cat, the DOG.", "paper", None) == "the cat the dog"
    decomposed = "Cafe\u0301!\n"
    assert apply_normalisation(decomposed, "raw", None) == "Caf\u00e9!\n"


def test_apply_normalisation_unknown() -> None:
    with pytest.raises(CorpusError, match=r"Unknown normalisation 'lower'"):
        apply_normalisation("abc", "lower", None)


# --------------------------------------------------------------------------- prepare_corpus

TEXT = " ".join(["the cat sat on the mat and the dog sat on the log"] * 20) + " zebra"


def test_paper_corpus_basics() -> None:
    c = prepare_corpus(TEXT, validation=0.1, test_fraction=0.1)
    assert isinstance(c, Corpus)
    assert c.normalisation == "paper"
    assert c.symbols == PAPER_SYMBOLS
    assert c.vocabulary == sorted({"the", "cat", "sat", "on", "mat", "and", "dog", "log"})
    for arr, txt in ((c.train, c.train_text), (c.validation, c.validation_text), (c.test, c.test_text)):
        assert arr.dtype == np.int64
        assert "".join(PAPER_SYMBOLS[i] for i in arr) == txt
    # The word seen only in the test part becomes "rare".
    assert c.test_text.endswith(" rare")
    assert "zebra" not in c.test_text


def test_rare_word_in_train_and_test() -> None:
    train_words = "alpha beta alpha beta unique alpha beta " * 1
    text = (train_words * 10) + "once " + (train_words * 10) + "once alpha beta"
    # "unique" is frequent; "once" appears once in train and once in the test part.
    c = prepare_corpus(text, test_fraction=0.1, validation=0.0)
    assert "once" not in c.vocabulary
    assert "once" not in c.train_text and "once" not in c.test_text
    assert c.train_text.count("rare") == 1
    assert "rare" in c.test_text
    assert c.validation.size == 0 and c.validation_text == ""


def test_split_sizes_and_word_boundaries() -> None:
    words = [f"w{chr(97 + i)}{chr(98 + i)}" for i in range(20)]
    text = " ".join(words * 60)  # every word frequent: no rare replacement
    norm = normalise_paper_base(text)
    c = prepare_corpus(text, test_fraction=0.2, validation=0.25)
    full = c.train_full_text
    assert full + " " + c.test_text == norm
    assert abs(len(full) - 0.8 * len(norm)) <= 5
    assert c.train_text + c.validation_text == full
    assert abs(len(c.validation_text) - 0.25 * len(full)) <= 5
    assert not c.test_text.startswith(" ") and not c.validation_text.startswith(" ")
    assert np.array_equal(c.train_full, np.concatenate([c.train, c.validation]))
    assert c.train.size + c.validation.size + c.test.size == len(norm) - 1


def test_split_zero_test_and_validation() -> None:
    c = prepare_corpus(TEXT, test_fraction=0, validation=0)
    assert c.test.size == 0 and c.validation.size == 0
    assert c.train_text == normalise_paper_base(TEXT).replace("zebra", "rare")


def test_max_train_caps_training_part_only() -> None:
    c0 = prepare_corpus(TEXT, validation=0.0)
    c = prepare_corpus(TEXT, validation=0.0, max_train=100)
    assert len(c.train_text) <= 100
    assert c.train_text == c0.train_text[: len(c.train_text)]
    assert c.test_text == c0.test_text


def test_raw_keeps_everything() -> None:
    text = "Hello, World!\nIt's 42 o'clock.\n" * 10
    c = prepare_corpus(text, normalisation="raw", test_fraction=0.1, validation=0.1)
    assert c.vocabulary is None
    assert c.train_full_text + c.test_text == text
    assert c.symbols == sorted(set(c.train_full_text))
    assert "\n" in c.symbols and "," in c.symbols and "'" in c.symbols and "4" in c.symbols
    assert "".join(c.symbols[i] for i in c.test) == c.test_text


def test_raw_drops_characters_seen_only_in_test() -> None:
    text = "abab " * 40 + "ab&ab"
    c = prepare_corpus(text, normalisation="raw", test_fraction=0.1, validation=0.0)
    assert "&" not in c.symbols
    assert "&" not in c.test_text


def test_encode_unknown_characters() -> None:
    c = prepare_corpus(TEXT)
    assert np.array_equal(c.encode("cab"), [3, 1, 2])
    with pytest.raises(CorpusError, match=r"2 character\(s\) not in the corpus alphabet: '!', 'A'"):
        c.encode("a!A")
    many = "".join(chr(0x400 + i) for i in range(15))
    with pytest.raises(CorpusError, match=r"15 character.*and 5 more"):
        c.encode(many)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"test_fraction": 0.6}, r"test_fraction must be between 0 and 0\.5, got 0\.6"),
        ({"test_fraction": -0.1}, r"test_fraction must be between 0 and 0\.5"),
        ({"validation": 0.75}, r"validation must be between 0 and 0\.5, got 0\.75"),
        ({"validation": float("nan")}, r"validation must be between 0 and 0\.5"),
        ({"max_train": 1}, r"max_train must be an integer of at least 2"),
        ({"normalisation": "lower"}, r"Unknown normalisation 'lower'"),
    ],
)
def test_prepare_parameter_errors(kwargs: dict, pattern: str) -> None:
    with pytest.raises(CorpusError, match=pattern):
        prepare_corpus(TEXT, **kwargs)


def test_prepare_empty_after_normalisation() -> None:
    with pytest.raises(CorpusError, match=r"digits\.txt is empty after paper normalisation"):
        prepare_corpus("!!! ... ???", name="digits.txt")


def test_prepare_one_distinct_symbol() -> None:
    with pytest.raises(CorpusError, match=r"needs at least two distinct symbols"):
        prepare_corpus("aaaaaaaaaaaa", test_fraction=0.0, validation=0.0)
    with pytest.raises(CorpusError, match=r"needs at least two distinct symbols"):
        prepare_corpus("xxxxxxxxxx", normalisation="raw")


def test_prepare_training_part_too_short() -> None:
    with pytest.raises(CorpusError, match=r"training part of tiny is too short"):
        prepare_corpus("ab", normalisation="raw", test_fraction=0.0, validation=0.5, name="tiny")


def test_prepare_validation_part_too_short() -> None:
    with pytest.raises(CorpusError, match=r"too short for a validation share of 0\.1"):
        prepare_corpus("abcdefgh", normalisation="raw", test_fraction=0.0, validation=0.1)


def test_prepare_test_part_too_short() -> None:
    with pytest.raises(CorpusError, match=r"too short for a test share of 0\.1"):
        prepare_corpus("abcdefgh", normalisation="raw", test_fraction=0.1, validation=0.0)


# --------------------------------------------------------------------------- real corpora


def test_alice_paper_split() -> None:
    c = prepare_corpus(read_text(DATA / "carroll-alice.txt"), name="carroll-alice.txt")
    n_train, n_test = len(c.train_full_text), len(c.test_text)
    # Paper Table 4: 118931 / 13063 (its exact preprocessing differs slightly).
    assert abs(n_train - 118931) / 118931 < 0.03
    assert abs(n_test - 13063) / 13063 < 0.05
    assert 0.095 < c.validation.size / (c.train.size + c.validation.size) < 0.105
    assert c.train.max() < 27 and c.test.min() >= 0
    assert set(c.train_full_text) <= set(PAPER_SYMBOLS)
    assert "alice" in c.vocabulary and "rare" in c.train_text


def test_blake_raw() -> None:
    text = read_text(DATA / "blake-poems.txt")
    c = prepare_corpus(text, normalisation="raw", name="blake-poems.txt")
    assert c.train_full_text + c.test_text == text
    assert c.train.size + c.validation.size + c.test.size == len(text)


def test_a_fixed_raw_alphabet_drops_test_only_characters_like_a_new_corpus() -> None:
    raw = "abcab cabba cbacb " * 40 + "x@y#"  # '@', '#', 'x', 'y' occur only in the test part
    fresh = prepare_corpus(raw, normalisation="raw")
    again = prepare_corpus(raw, normalisation="raw", fixed_alphabet=(fresh.symbols, None))
    assert (again.train_text, again.validation_text, again.test_text) == (
        fresh.train_text,
        fresh.validation_text,
        fresh.test_text,
    )
    assert "@" not in again.test_text
    with pytest.raises(CorpusError, match="outside the model's alphabet"):  # the training part must fit
        prepare_corpus("x@" + raw, normalisation="raw", fixed_alphabet=(fresh.symbols, None))
