"""Models a tenth the size (issue 48, item 3): the file ``chmm train`` writes before (T dense, with the float64
expected counts) and after (T pruned at the largest threshold within the prune bound, without the counts), and the
BPS of each on the validation and test text of the training split.

Two ways:

* ``--model FILE --corpus TEXT``: apply the rule to a model trained already (its file holds the refit, so the
  rule measures on the validation text the refit saw; the test text is held out from both);
* ``--corpus TEXT --states N --pseudocount P``: train as ``chmm train`` does (one restart, ``--iterations``), then
  save both files: the rule measures on the selection run's model, held out from validation.

    python bench/bench_small_files.py --model /work/models/brown5000.npz \\
        --corpus /work/shared/corpora/chesterton-brown.txt
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import api  # noqa: E402
from engine.training import options as training_options  # noqa: E402
from engine.training.saving import model_to_save, prune_for_saving  # noqa: E402
from engine.training.stages import prepare_training_corpus, sequences_bps  # noqa: E402


def _file_mb(model: object, folder: str, name: str) -> float:
    """Save ``model`` under ``folder`` and return the file's size in MB (10^6 bytes)."""
    path = os.path.join(folder, name)
    api.save_model(model, path)
    return os.path.getsize(path) / 1e6


def _threshold_table(outcome: training_options.TrainOutcome, folder: str) -> list[dict[str, float | None]]:
    """Per threshold of the rule: the file's size without counts and with them, and the BPS cost of pruning on the
    validation and the test text, for the saved model (the refit: validation seen in training, test held out) and,
    when there is one apart from it, the selection model (both held out)."""
    corpus, model = outcome.corpus, outcome.model
    selected = outcome.selected if outcome.selected is not None and outcome.selected is not model else None
    texts = {"validation": corpus.validation_parts, "test": corpus.test_parts}
    models = {"saved": model, **({"selection": selected} if selected is not None else {})}
    base = {(m, t): sequences_bps(models[m], texts[t], "cpu") for m in models for t in texts}
    rows = []
    for threshold in sorted(api.CHOICES.PRUNE_THRESHOLDS, reverse=True):
        pruned = {m: prune_for_saving(models[m], threshold) for m in models}
        row: dict[str, float | None] = {
            "threshold": threshold,
            "mb": round(_file_mb(pruned["saved"].without_statistics(), folder, "t.npz"), 2),
            "mb_with_counts": round(_file_mb(pruned["saved"], folder, "t.npz"), 2),
        }
        for m, t in base:
            row[f"{m}_{t}_cost"] = round(sequences_bps(pruned[m], texts[t], "cpu") - base[m, t], 5)
        rows.append(row)
    return rows


def main() -> None:
    """Measure and print one JSON object: sizes (MB) and BPS of the file before and after."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--model", default=None, help="a trained model file (else train one)")
    parser.add_argument("--states", type=int, default=5000)
    parser.add_argument("--pseudocount", type=float, default=1e-4)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--bound", type=float, default=api.DEFAULTS.PRUNE_BOUND)
    args = parser.parse_args()
    text = Path(args.corpus).read_text(encoding="utf-8")
    started = time.perf_counter()
    if args.model:
        model = api.load_model(args.model)
        settings = model.metadata.get("settings", {})
        options = api.TrainOptions(
            validation=settings.get("validation", 0.1), test_fraction=settings.get("test_fraction", 0.1)
        )
        corpus = prepare_training_corpus(text, options, Path(args.corpus).name, model)
        summary = {
            key: sequences_bps(model, parts, "cpu")
            for key, parts in (("train_bps", corpus.train_full_parts), ("test_bps", corpus.test_parts))
        }
        summary["refit_iterations"] = 1  # the file holds the refit on training + validation text
        outcome = training_options.TrainOutcome(model, summary, None, corpus, None)  # type: ignore[arg-type]
    else:
        options = api.TrainOptions(
            states=args.states, pseudocount=args.pseudocount, iterations=args.iterations, restarts=1
        )
        outcome = api.train_text(text, options, name=Path(args.corpus).name)
    trained_s = time.perf_counter() - started
    dense = outcome.model
    before_validation = sequences_bps(dense, outcome.corpus.validation_parts, "cpu")
    before_test = outcome.summary["test_bps"]
    with tempfile.TemporaryDirectory() as folder:
        before_mb = _file_mb(dense, folder, "before.npz")
        started = time.perf_counter()
        small, record = model_to_save(outcome, args.bound, keep_statistics=False)
        rule_s = time.perf_counter() - started
        after_mb = _file_mb(small, folder, "after.npz")
        loaded = api.load_model(os.path.join(folder, "after.npz"))
        after_validation = sequences_bps(loaded, outcome.corpus.validation_parts, "cpu")
        after_test = sequences_bps(loaded, outcome.corpus.test_parts, "cpu")
        dense_no_counts_mb = _file_mb(dense.without_statistics(), folder, "dense-no-counts.npz")
        table = _threshold_table(outcome, folder)
    print(
        json.dumps(
            {
                "corpus": args.corpus,
                "model": args.model,
                "states": dense.n_states,
                "seconds_training_or_loading": round(trained_s, 1),
                "seconds_rule": round(rule_s, 1),
                "before_mb": round(before_mb, 2),
                "dense_without_counts_mb": round(dense_no_counts_mb, 2),
                "after_mb": round(after_mb, 2),
                "ratio": round(after_mb / before_mb, 4),
                "threshold": record["threshold"],
                "rule_validation_cost": record.get("validation_cost"),
                "tried": record.get("tried"),
                "validation_bps_before": before_validation,
                "validation_bps_after": after_validation,
                "test_bps_before": before_test,
                "test_bps_after": after_test,
                "nonzeros_kept": record.get("nonzeros"),
                "per_threshold": table,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
