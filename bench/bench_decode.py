"""Benchmark: decoding scrambled text by MAP inference, the experiment of the paper's section 4.2.2.

Trains a CHMM on melville-moby_dick.txt (the paper's preprocessing, training part capped at 750,000 characters as
in the paper; batch EM with early stopping on the validation share, then the refit) and caches it in bench/out/,
so a rerun skips training. Then:

* samples thirty 600-character passages from the test part (random starts at word boundaries, fixed seed),
  scrambles every word's interior, decodes each passage, and reports word and character accuracy and the decoding
  time per passage (paper: 99.02% words, 99.42% characters with 30,000 states);
* builds a word list from another corpus (war-and-peace.txt): lowercase words (mostly written in lowercase there,
  which drops names) of 4 to 8 letters that never occur in the normalised Moby Dick text and whose interior is not
  one repeated letter, the most frequent first (the paper used 638 unseen words among the 3,000 most frequent
  English words); each is scrambled, put in the frame "let us WORD and relax" (the frame itself unscrambled),
  decoded, and counted correct if the word comes back exactly (paper: 74.1 / 45.5 / 40.3 / 27.9 / 21.6% for
  4 / 5 / 6 / 7 / 8 letters).

Both decoders are measured: "unconstrained" (the paper's Viterbi with uniform evidence over the interior letters)
and "constrained" (each decoded interior a permutation of the scrambled one; see engine/backends/scramble.py).

    python bench/bench_decode.py                        # 3,000 states, batch EM (cached model if present)
    python bench/bench_decode.py --states 6000 --algorithm online --batch-size 2000
    CHMM_CORPORA=/path/to/corpora python bench/bench_decode.py
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe_machine  # noqa: E402

from engine import training  # noqa: E402
from engine.backends import (
    model_files,  # noqa: E402
    scramble,  # noqa: E402
)
from engine.backends.cpu import inference  # noqa: E402
from engine.corpora import text  # noqa: E402
from engine.model.dense import CHMM  # noqa: E402

CORPORA = Path(os.environ.get("CHMM_CORPORA", ROOT.parent / "shared" / "corpora"))
TRAIN_CORPUS = "melville-moby_dick.txt"
WORD_CORPUS = "war-and-peace.txt"
OUT = ROOT / "bench" / "out"
MAX_TRAIN = 750_000
PASSAGE = 600
FRAME = ("let us ", " and relax")
PAPER_UNSEEN = {4: 74.1, 5: 45.45, 6: 40.3, 7: 27.9, 8: 21.6}
VARIANTS = ("unconstrained", "constrained")


def train_or_load(args: argparse.Namespace, corpus_text: str) -> tuple[CHMM, float | None]:
    """The cached model for these settings, or a freshly trained one (saved to bench/out/). Returns it and the
    training seconds (None when loaded)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"decode-moby-{args.states}-{args.algorithm}-b{args.batch_size}-i{args.iterations}-s{args.seed}.npz"
    if path.exists() and not args.retrain:
        print(f"using the cached model {path.relative_to(ROOT)}", file=sys.stderr)
        return model_files.load_model(path), None
    options = training.TrainOptions(
        pseudocount=1e-6,
        states=args.states,
        normalisation="paper",
        algorithm=args.algorithm,
        iterations=args.iterations,
        batch_size=args.batch_size,
        max_train=MAX_TRAIN,
        seed=args.seed,
    )

    def progress(record: object) -> None:
        print(f"  {record}", file=sys.stderr, flush=True)

    outcome = training.train_text(
        corpus_text, options, callback=progress, name=TRAIN_CORPUS, log=lambda s: print(s, file=sys.stderr)
    )
    if outcome.result.stopped in ("cancelled", "failed"):
        sys.exit(f"training {outcome.result.stopped}: {outcome.result.error}")
    model_files.save_model(outcome.model, path)
    return outcome.model, outcome.summary["seconds"]


def sample_passages(test_text: str, count: int, rng: np.random.Generator) -> list[str]:
    """``count`` passages of PASSAGE characters of the test text, each starting at a random word start (and not
    ending with a space)."""
    starts = np.array([0] + [m.end() for m in re.finditer(" ", test_text)])
    starts = starts[starts + PASSAGE <= len(test_text)]
    # a passage must not end with a space: the decoder's normalisation would strip it
    starts = starts[[test_text[s + PASSAGE - 1] != " " for s in starts]]
    chosen = rng.choice(starts, size=count, replace=False)
    return [test_text[s : s + PASSAGE] for s in sorted(chosen)]


def is_scrambled_word(word: str) -> bool:
    """A word whose interior carries uncertainty (at least two distinct interior letters)."""
    return len(word) >= 4 and len(set(word[1:-1])) >= 2


def passage_experiment(model: CHMM, passages: list[str], rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Scramble and decode every passage with both decoders; word and character accuracy, seconds per passage."""
    scrambled = [scramble.scramble_text(p, rng) for p in passages]
    figures: dict[str, dict[str, float]] = {}
    baseline_words = [
        (a, b)
        for p, s in zip(passages, scrambled, strict=True)
        for a, b in zip(p.split(" "), s.split(" "), strict=True)
    ]
    baseline_hard = [(a, b) for a, b in baseline_words if is_scrambled_word(a)]
    figures["scrambled input"] = {
        "words": sum(a == b for a, b in baseline_words) / len(baseline_words),
        "scrambled_words": sum(a == b for a, b in baseline_hard) / len(baseline_hard),
        "chars": sum(a == b for p, s in zip(passages, scrambled, strict=True) for a, b in zip(p, s, strict=True))
        / sum(map(len, passages)),
    }
    for variant in VARIANTS:
        word_pairs, char_right, char_total, seconds, relaxed = [], 0, 0, [], 0
        for original, mixed in zip(passages, scrambled, strict=True):
            started = time.perf_counter()
            result = scramble.decode_scrambled(model, mixed, constrained=variant == "constrained")
            seconds.append(time.perf_counter() - started)
            relaxed += result.relaxed_words
            assert result.scrambled == mixed, "passages are normalised text: decoding must not change them"
            word_pairs += list(zip(original.split(" "), result.decoded.split(" "), strict=True))
            char_right += sum(a == b for a, b in zip(original, result.decoded, strict=True))
            char_total += len(original)
        hard = [(a, b) for a, b in word_pairs if is_scrambled_word(a)]
        figures[variant] = {
            "words": sum(a == b for a, b in word_pairs) / len(word_pairs),
            "chars": char_right / char_total,
            "scrambled_words": sum(a == b for a, b in hard) / len(hard),
            "n_words": len(word_pairs),
            "n_scrambled": len(hard),
            "mean_s": float(np.mean(seconds)),
            "max_s": float(np.max(seconds)),
            "relaxed": relaxed,
        }
    return figures


def unseen_words(word_text: str, seen: set[str], per_length: int) -> dict[int, list[str]]:
    """Up to ``per_length`` words per length 4..8 from ``word_text``, most frequent first: written in lowercase in
    at least half of their occurrences (drops names), not in ``seen``, interior not one repeated letter."""
    tokens = re.findall(r"[A-Za-z]+", unicodedata_fold(word_text))
    counts = Counter(t.lower() for t in tokens)
    lower = Counter(t for t in tokens if t.islower())
    chosen: dict[int, list[str]] = {n: [] for n in range(4, 9)}
    for word, n in counts.most_common():
        length = len(word)
        if length in chosen and len(chosen[length]) < per_length and word not in seen:
            if lower[word] >= 0.5 * n and len(set(word[1:-1])) >= 2:
                chosen[length].append(word)
    return chosen


def unicodedata_fold(s: str) -> str:
    """Accents folded like the paper normalisation does ("é" -> "e")."""
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


def unseen_experiment(
    model: CHMM, words_by_length: dict[int, list[str]], rng: np.random.Generator
) -> dict[int, dict[str, float]]:
    """Share of unseen words decoded exactly, per length and decoder (word scrambled inside FRAME)."""
    out: dict[int, dict[str, float]] = {}
    for length, words in words_by_length.items():
        row: dict[str, float] = {"n": len(words)}
        for variant in VARIANTS:
            right = 0
            for word in words:
                mixed = FRAME[0] + scramble.scramble_text(word, rng) + FRAME[1]
                result = scramble.decode_scrambled(model, mixed, constrained=variant == "constrained")
                right += result.decoded[len(FRAME[0]) : len(FRAME[0]) + length] == word
            row[variant] = right / len(words) if words else float("nan")
        out[length] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=3000)
    parser.add_argument("--algorithm", choices=["em", "online", "viterbi"], default="em")
    parser.add_argument("--iterations", type=int, default=100, help="EM iterations at most (early stopping)")
    parser.add_argument("--batch-size", type=int, default=10_000, help="online EM batch length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passages", type=int, default=30)
    parser.add_argument("--words", type=int, default=200, help="unseen words per length")
    parser.add_argument("--retrain", action="store_true", help="train even if a cached model exists")
    args = parser.parse_args()
    for name in (TRAIN_CORPUS, WORD_CORPUS):
        if not (CORPORA / name).is_file():
            sys.exit(f"corpus not found: {CORPORA / name} (set CHMM_CORPORA to the folder holding it)")
    moby = text.read_text(CORPORA / TRAIN_CORPUS)
    model, train_seconds = train_or_load(args, moby)
    corpus = text.prepare_corpus(moby, "paper", max_train=MAX_TRAIN)  # the same split as the training run's
    meta = model.metadata
    test_bps = meta.get("test_bps") or inference.score(model, corpus.test).bps

    rng = np.random.default_rng(args.seed)
    passages = sample_passages(corpus.test_text, args.passages, rng)
    scramble.decode_scrambled(model, "let us rlaex", constrained=True)  # compile the kernels outside the timings
    scramble.decode_scrambled(model, "let us rlaex")
    passage_figures = passage_experiment(model, passages, rng)
    seen = set(text.normalise_paper_base(moby).split(" "))
    words = unseen_words(text.read_text(CORPORA / WORD_CORPUS), seen, args.words)
    unseen_figures = unseen_experiment(model, words, rng)

    history = meta.get("history", [])
    selection = sum(r["seconds"] for r in history)
    trained = (
        f"{train_seconds:.0f} s"
        if train_seconds is not None
        else f"cached model (its selection run took {selection:.0f} s; the refit about as long per iteration)"
    )
    print(f"machine: {describe_machine()}")
    settings = meta.get("settings", {})
    sizes = meta.get("sizes", {})
    print(
        f"model: {model.n_states:,} states ({meta.get('allocation')} allocation), {settings.get('algorithm')} "
        f"{len(history)} iterations (best {meta.get('best_iteration')}) + refit {meta.get('refit_iterations')}; "
        f"training part {sizes.get('train', 0) + sizes.get('validation', 0):,} characters of {TRAIN_CORPUS} "
        f"(paper preprocessing, capped at {MAX_TRAIN:,}); training time {trained}; test BPS {test_bps:.3f}"
    )
    print()
    print(f"{args.passages} passages of {PASSAGE} characters from the test part (seed {args.seed})")
    print()
    print(
        "| decoder | word acc. | char acc. | scrambled-word acc. | s/passage (mean) | s/passage (max) "
        "| paper (30,000 states) |"
    )
    print("|---|--:|--:|--:|--:|--:|---|")
    base = passage_figures["scrambled input"]
    print(
        f"| none (scrambled input) | {base['words']:.2%} | {base['chars']:.2%} | {base['scrambled_words']:.2%} "
        "| - | - | - |"
    )
    for variant in VARIANTS:
        f = passage_figures[variant]
        paper = "99.02% words, 99.42% chars" if variant == "unconstrained" else "-"
        relaxed = f" ({f['relaxed']:.0f} long words relaxed)" if variant == "constrained" and f["relaxed"] else ""
        print(
            f"| {variant}{relaxed} | {f['words']:.2%} | {f['chars']:.2%} | {f['scrambled_words']:.2%} |"
            f" {f['mean_s']:.3f} | {f['max_s']:.3f} | {paper} |"
        )
    f = passage_figures["unconstrained"]
    print()
    print(
        f"{f['n_words']:.0f} words, {f['n_scrambled']:.0f} of them with an uncertain interior (>= 4 letters, >= 2 "
        "distinct interior letters); word acc. counts every word, scrambled-word acc. only those."
    )
    print()
    print(f"Unseen words from {WORD_CORPUS} (absent from {TRAIN_CORPUS}), in the frame '{FRAME[0]}X{FRAME[1]}'")
    print()
    print("| letters | words | unconstrained | constrained | paper |")
    print("|--:|--:|--:|--:|--:|")
    for length, row in unseen_figures.items():
        print(
            f"| {length} | {row['n']:.0f} | {row['unconstrained']:.1%} | {row['constrained']:.1%} |"
            f" {PAPER_UNSEEN[length]:.1f}% |"
        )


if __name__ == "__main__":
    main()
