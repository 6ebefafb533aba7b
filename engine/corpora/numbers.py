"""Numbers in words, for the paper's normalisation (:func:`engine.corpora.text.normalise_paper_base`): every run of
ASCII digits becomes English words, so that "1865" is read as the words a reader says."""

from __future__ import annotations

import re

_ONES = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen",
]  # fmt: skip
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10**9, "billion"), (10**6, "million"), (10**3, "thousand")]
_MAX_SPELLED_DIGITS = 12
_DIGIT_RUN = re.compile(r"[0-9]+")


def _below_thousand(n: int) -> list[str]:
    """English words for 1 <= n <= 999 (no "and", no hyphens)."""
    words: list[str] = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10])
        n %= 10
    if n > 0:
        words.append(_ONES[n])
    return words


def _integer_words(n: int) -> list[str]:
    """English words for 0 <= n < 10**12, e.g. 1865 -> one thousand eight hundred sixty five."""
    if n == 0:
        return ["zero"]
    words: list[str] = []
    for scale, scale_name in _SCALES:
        if n >= scale:
            words += _below_thousand(n // scale) + [scale_name]
            n %= scale
    if n > 0:
        words += _below_thousand(n)
    return words


def _digit_run_words(digits: str) -> str:
    """Words for one run of ASCII digits.

    Runs longer than 12 digits, and runs with a leading zero such as "007", are spelled
    digit by digit; other runs are read as an integer.
    """
    if len(digits) > _MAX_SPELLED_DIGITS or (len(digits) > 1 and digits[0] == "0"):
        return " ".join(_ONES[int(d)] for d in digits)
    return " ".join(_integer_words(int(digits)))


def numbers_to_words(text: str) -> str:
    """Replace every run of ASCII digits by English words surrounded by spaces.

    "42" -> " forty two ", "1865" -> " one thousand eight hundred sixty five ", "0" -> " zero ";
    runs of more than 12 digits (and runs with a leading zero) are spelled digit by digit.
    """
    return _DIGIT_RUN.sub(lambda m: f" {_digit_run_words(m.group())} ", text)
