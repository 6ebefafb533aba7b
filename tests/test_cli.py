"""The `chmm` command line contract: exit codes, one-line errors, --json figures, nothing partial written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import FIXED

from engine import api, cli, training
from engine.model.dense import load

DATA = Path(__file__).parent / "data"
BLAKE = DATA / "blake-poems.txt"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "blake.npz"
    assert (
        cli.main(
            [
                "train",
                str(BLAKE),
                "-o",
                str(path),
                "--states",
                "120",
                *FIXED,
                "--iterations",
                "4",
                "--quiet",
            ]
        )
        == 0
    )
    return path


def test_train_json_figures_and_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "m.npz"
    code, out, _ = run_cli(
        [
            "train",
            BLAKE,
            "-o",
            out_path,
            "--states",
            "100",
            *FIXED,
            "--iterations",
            "3",
            "--json",
            "--quiet",
        ],
        capsys,
    )
    assert code == 0
    figures = last_json(out)
    for key in ("train_bps", "validation_bps", "iterations", "seconds", "states", "symbols"):
        assert key in figures
    assert figures["states"] == 100
    assert 0 < figures["train_bps"] < np.log2(27) + 0.1
    assert figures["iterations"] >= 1
    model = load(out_path)
    assert model.n_states == 100
    assert model.codec.normalisation == "paper"
    assert model.metadata["settings"]["seed"] == 0
    assert len(model.metadata["history"]) == figures["iterations"]


def test_train_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--start picks restart 0's kind of start (restarts alternate from it) and is kept in the model's settings;
    the default is the engine's; a peer learner refuses it; an unknown kind is refused with one sentence."""
    base = [
        "train",
        BLAKE,
        "--states",
        "60",
        *FIXED,
        "--iterations",
        "2",
        "--restarts",
        "2",
        "--json",
        "--quiet",
    ]
    for given, expected in ((["--start", "uniform"], ["uniform", "aligned"]), ([], ["aligned", "uniform"])):
        out_path = tmp_path / f"m{len(given)}.npz"
        code, out, _ = run_cli([*base, "-o", out_path, *given], capsys)
        assert code == 0
        assert [line["start"] for line in last_json(out)["restarts"]] == expected
        assert load(out_path).metadata["settings"]["start"] == expected[0]
    peer = ["train", BLAKE, "-o", tmp_path / "p.npz", "--learner", "ngram", "--start", "uniform"]
    expect_error(peer, capsys, "start")
    with pytest.raises(SystemExit):  # argparse's usage error names the choices
        cli.main(["train", str(BLAKE), "-o", str(tmp_path / "x.npz"), "--start", "diagonal"])
    assert "aligned" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown start 'diagonal'; choose one of aligned, uniform"):
        training.TrainOptions(start="diagonal").validate()


def test_train_is_reproducible_with_a_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [tmp_path / "a.npz", tmp_path / "b.npz"]
    for path in paths:
        assert (
            run_cli(
                [
                    "train",
                    BLAKE,
                    "-o",
                    path,
                    "--states",
                    "60",
                    *FIXED,
                    "--iterations",
                    "2",
                    "--seed",
                    "7",
                    "--quiet",
                ],
                capsys,
            )[0]
            == 0
        )
    a, b = load(paths[0]), load(paths[1])
    np.testing.assert_array_equal(a.T, b.T)


@pytest.mark.parametrize("algorithm", ["online", "viterbi"])
def test_train_other_algorithms(algorithm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "train",
        BLAKE,
        "-o",
        tmp_path / "m.npz",
        "--states",
        "80",
        *FIXED,
        "--iterations",
        "2",
        "--json",
        "--quiet",
    ]
    code, out, _ = run_cli(args + ["--algorithm", algorithm, "--batch-size", "5000"], capsys)
    assert code == 0
    assert np.isfinite(last_json(out)["train_bps"])


def test_score_json(trained_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["score", trained_model, DATA / "carroll-alice.txt", "--json"], capsys)
    assert code == 0
    figures = last_json(out)
    assert set(figures) == {"bps", "symbols", "zero_probability_events"}
    assert 1.0 < figures["bps"] < 5.0
    assert figures["symbols"] > 100_000


def test_score_counts_zero_probability_events(tmp_path: Path, capsys) -> None:
    # a raw model of "abc cab bca ..." has no block for the pair (a, a): "aaa" holds two impossible transitions,
    # scored by the bigram back-off instead of crashing or returning infinity
    corpus = tmp_path / "abc.txt"
    corpus.write_text("abc cab bca " * 50, encoding="utf-8")
    model_path = tmp_path / "raw.npz"
    args = [
        "train",
        corpus,
        "-o",
        model_path,
        "--states",
        "8",
        *FIXED,
        "--normalise",
        "raw",
        "--iterations",
        "3",
        "--quiet",
    ]
    assert run_cli(args, capsys)[0] == 0
    text = tmp_path / "odd.txt"
    text.write_text("abc aaa", encoding="utf-8")
    code, out, err = run_cli(["score", model_path, text], capsys)
    assert code == 0 and "2 zero-probability transition(s)" in err
    code, out, _ = run_cli(["score", model_path, text, "--json"], capsys)
    figures = last_json(out)
    assert figures["zero_probability_events"] == 2
    assert np.isfinite(figures["bps"]) and figures["bps"] > 5  # two ~20-bit events over 7 symbols


def test_sample_length_and_prefix(trained_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["sample", trained_model, "--length", "200", "--seed", "3"], capsys)
    assert code == 0
    text = out.rstrip("\n")
    assert len(text) == 200
    assert set(text) <= set(" abcdefghijklmnopqrstuvwxyz")
    code, again, _ = run_cli(["sample", trained_model, "--length", "200", "--seed", "3"], capsys)
    assert again == out
    code, out, _ = run_cli(["sample", trained_model, "--length", "50", "--prefix", "the tyger"], capsys)
    assert code == 0 and len(out.rstrip("\n")) == 50


def test_sample_refuses_a_prefix_over_its_bound_before_reading_the_model(
    trained_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 51, item 2: ``chmm sample --prefix`` had no bound either; one over it is refused in one sentence before
    the model is read (a missing model file is not even noticed) and before any forward pass."""
    from engine.backends.cpu import sampling

    too_long = "a" * (api.DEFAULTS.MAX_PREFIX_CHARACTERS + 1)
    expect_error(["sample", tmp_path / "missing.npz", "--prefix", too_long], capsys, "more than the 100,000")

    def no_forward_pass(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the prefix's forward pass ran")

    monkeypatch.setattr(sampling, "forward", no_forward_pass)
    expect_error(["sample", trained_model, "--prefix", too_long], capsys, "a sample may continue")
    with pytest.raises(ValueError, match="more than the 100,000"):
        api.sample_text(api.load_model(trained_model), 10, 0, too_long)


# ------------------------------------------------------------------------------------------- bad input
def expect_error(args: list, capsys: pytest.CaptureFixture[str], pattern: str) -> None:
    code, out, err = run_cli(args, capsys)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("chmm: error:")
    assert pattern.lower() in lines[0].lower(), lines[0]


def test_missing_corpus(tmp_path: Path, capsys) -> None:
    expect_error(["train", tmp_path / "nope.txt", "-o", tmp_path / "m.npz"], capsys, "not found")
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"\x00\x01\x02" * 500, "binary"),
        (b"caf\xe9 au lait " * 20, "not valid UTF-8"),
        (b"AAAA" * 50, "two distinct symbols"),
        (b"!!! ??? ... ---", "empty after paper normalisation"),
    ],
)
def test_bad_corpus(content: bytes, message: str, tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(content)
    expect_error(["train", corpus, "-o", tmp_path / "m.npz", "--states", "50"], capsys, message)
    assert not (tmp_path / "m.npz").exists()


def test_corpus_too_short_for_validation(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "short.txt"
    corpus.write_text("ab ba", encoding="utf-8")
    expect_error(["train", corpus, "-o", tmp_path / "m.npz", "--states", "10"], capsys, "too short")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--states", "5"], "at least one clone per symbol"),
        (["--iterations", "0"], "iterations"),
        (["--validation", "0.9"], "validation share"),
        (["--pseudocount", "-1"], "pseudocount"),
        (["--batch-size", "1", "--algorithm", "online"], "batch size"),
        (["--memory", "1.5", "--algorithm", "online"], "lambda"),
        (["--states", "1000000000000"], "integer from 2 to 100,000,000"),  # found by QA: an overflow message
    ],
)
def test_impossible_parameters(extra: list[str], message: str, tmp_path: Path, capsys) -> None:
    expect_error(["train", BLAKE, "-o", tmp_path / "m.npz", *extra], capsys, message)
    assert not (tmp_path / "m.npz").exists()


def test_gpu_backend_without_gpu(tmp_path: Path, capsys) -> None:
    from engine.backends.gpu.backend import gpu_status

    if gpu_status()[0]:
        pytest.skip("a GPU is present")
    expect_error(["train", BLAKE, "-o", tmp_path / "m.npz", "--backend", "gpu"], capsys, "GPU backend is not available")


def test_damaged_model(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a model at all")
    expect_error(["score", bad, BLAKE], capsys, "not a readable CHMM Explorer model")
    expect_error(["sample", tmp_path / "missing.npz"], capsys, "no such model file")


def test_raw_model_rejects_unknown_characters(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "abc.txt"
    corpus.write_text("abc cab bca " * 50, encoding="utf-8")
    model_path = tmp_path / "raw.npz"
    assert (
        run_cli(
            [
                "train",
                corpus,
                "-o",
                model_path,
                "--states",
                "8",
                *FIXED,
                "--normalise",
                "raw",
                "--iterations",
                "2",
                "--quiet",
            ],
            capsys,
        )[0]
        == 0
    )
    text = tmp_path / "other.txt"
    text.write_text("abz!", encoding="utf-8")
    expect_error(["score", model_path, text], capsys, "outside the model's alphabet")


def test_failed_training_keeps_existing_model(tmp_path: Path, trained_model: Path, capsys) -> None:
    target = tmp_path / "keep.npz"
    target.write_bytes(trained_model.read_bytes())
    before = target.read_bytes()
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    expect_error(["train", empty, "-o", target], capsys, "is empty")
    assert target.read_bytes() == before


def test_interrupted_training_writes_nothing(tmp_path: Path, trained_model: Path) -> None:
    """Ctrl-C during training cancels it within an iteration; the existing output file stays as it was."""
    target = tmp_path / "keep.npz"
    target.write_bytes(trained_model.read_bytes())
    before = target.read_bytes()
    command = [sys.executable, "-m", "engine.cli", "train", str(BLAKE), "-o", str(target), "--states", "300"]
    process = subprocess.Popen(
        command + ["--iterations", "1000", "--tolerance", "0", "--patience", "1000"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("iteration"):
            break
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert "cancelled" in err
    assert target.read_bytes() == before


def test_train_continues_from_init_model(tmp_path: Path, trained_model: Path, capsys) -> None:
    """--init keeps the model's alphabet, vocabulary and clones and trains further on another text."""
    before = load(trained_model)
    out_path = tmp_path / "continued.npz"
    args = ["train", DATA / "carroll-alice.txt", "-o", out_path, "--init", trained_model, "--iterations", "2"]
    code, out, _ = run_cli(args + ["--json", "--quiet"], capsys)
    assert code == 0
    after = load(out_path)
    np.testing.assert_array_equal(after.n_clones, before.n_clones)
    assert after.codec.vocabulary == before.codec.vocabulary
    assert not np.array_equal(after.T[: before.T.size], before.T) or after.layout.n_blocks != before.layout.n_blocks
    assert np.isfinite(last_json(out)["test_bps"])


def test_training_from_a_pruned_model_keeps_it_pruned(tmp_path: Path, trained_model: Path, capsys) -> None:
    pruned_path = tmp_path / "pruned.npz"
    code, _, _ = run_cli(["prune", trained_model, "-o", pruned_path, "--threshold", "1e-2"], capsys)
    assert code == 0
    pruned = load(pruned_path)
    zeros = pruned.T == 0
    assert pruned.metadata.get("pruned") and zeros.any()
    out_path = tmp_path / "continued.npz"
    args = ["train", BLAKE, "-o", out_path, "--init", pruned_path, "--iterations", "2", "--quiet", "--json"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    after = load(out_path)
    assert after.metadata.get("pruned") == pruned.metadata["pruned"]
    assert after.backoff_weight == pruned.backoff_weight and after.fixed_zeros
    # blocks pruning emptied come back for pairs the text has (random, small); inside the kept blocks zeros stay zero
    assert after.layout.n_blocks >= pruned.layout.n_blocks
    for k, (i, j) in enumerate(pruned.layout.block_pairs):
        lo, hi = pruned.layout.block_offset[k], pruned.layout.block_offset[k + 1]
        k_after = after.layout.find_block(i, j)
        block = after.T[after.layout.block_offset[k_after] : after.layout.block_offset[k_after + 1]]
        assert np.all(block[zeros[lo:hi]] == 0)


def test_init_refuses_settings_the_model_fixes(tmp_path: Path, trained_model: Path, capsys) -> None:
    """Found by QA: --states and --normalise were silently ignored with --init."""
    for extra in (["--states", "80"], ["--normalise", "raw"]):
        expect_error(["train", BLAKE, "-o", tmp_path / "m.npz", "--init", trained_model, *extra], capsys, "--init")
    assert not (tmp_path / "m.npz").exists()


def test_infomap_and_app_settings_out_of_range_give_one_line(trained_model: Path, tmp_path: Path, capsys) -> None:
    """Found by QA: a billion Infomap trials ended in a std::bad_alloc traceback, a bad port in Dash's."""
    expect_error(["communities", trained_model, "-o", tmp_path / "c", "--trials", "1000000000"], capsys, "10,000")
    expect_error(["app", "--port", "99999"], capsys, "between 1 and 65535")
    expect_error(["app", "--host", "256.1.1.1"], capsys, "cannot listen on 256.1.1.1")
    assert not (tmp_path / "c").exists()


def test_ctrl_c_outside_training_is_one_line(trained_model: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "model_communities", interrupted)
    code, _, err = run_cli(["communities", trained_model, "-o", tmp_path / "c"], capsys)
    assert code == 130 and err.strip() == "chmm: interrupted"


def test_the_command_line_reference_is_the_parser_s() -> None:
    """docs/cli.md is what the argument parser says (regenerate it with ``python docs/make_cli.py``)."""
    from pathlib import Path

    written = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == cli.reference_markdown(), "docs/cli.md is stale: run python docs/make_cli.py"
    assert "## chmm train" in written and "--chunk" in written and "## chmm app" in written


# ------------------------------------------------------------------------------------------ hostile input (issue 36)
def test_a_device_is_refused_before_it_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect_error(["train", "/dev/zero", "-o", tmp_path / "m.npz"], capsys, "is not a regular file")


def test_an_output_that_cannot_be_written_as_asked_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "poems.txt"
    corpus.write_bytes(BLAKE.read_bytes())
    fixed = ["--states", "60", "--pseudocount", "1e-3", "--iterations", "1"]
    expect_error(["train", corpus, "-o", tmp_path, *fixed], capsys, "is a folder; give a file name")
    expect_error(["train", corpus, "-o", tmp_path / "nowhere" / "m.npz", *fixed], capsys, "does not exist")
    assert not (tmp_path / "nowhere").exists()  # not created behind the user's back
    expect_error(["train", corpus, "-o", corpus, *fixed], capsys, "is also an input of this command")
    assert corpus.read_bytes() == BLAKE.read_bytes()  # the corpus is not overwritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poems.txt"]


def test_states_past_the_machine_memory_are_refused_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expect_error(
        ["train", BLAKE, "-o", tmp_path / "m.npz", "--states", "10000000", "--pseudocount", "1e-3"],
        capsys,
        "states grow from a dense model of 1,000,000, which would need about",
    )


def test_sigterm_while_saving_leaves_no_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    import engine.model.dense as model_module

    real = model_module.np.lib.format.write_array

    def killed_midway(member, array, **options):  # type: ignore[no-untyped-def]
        member.write(b"\x93NUMPY")  # the first member is under way when the signal comes
        os.kill(os.getpid(), signal.SIGTERM)
        return real(member, array, **options)

    monkeypatch.setattr(model_module.np.lib.format, "write_array", killed_midway)
    out = tmp_path / "m.npz"
    before = signal.getsignal(signal.SIGTERM)
    args = ["train", BLAKE, "-o", out, "--states", "60", "--pseudocount", "1e-3", "--algorithm", "em"]
    code, _, err = run_cli([*args, "--iterations", "1", "--quiet"], capsys)
    assert code == 130 and "chmm: interrupted" in err
    assert list(tmp_path.iterdir()) == []  # neither the model nor a temporary file
    assert signal.getsignal(signal.SIGTERM) is before  # the command gives the handler back


def test_out_of_memory_advice_fits_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Issue 51: `chmm map` out of memory on a huge walk advised "fewer states or a shorter corpus"; each command's
    advice now names what it reads."""
    from engine import api, cli

    walk = tmp_path / "walk.csv"
    walk.write_text("action,observation\n0,1\n1,2\n", encoding="utf-8")

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(api.maps, "read_walk", out_of_memory)
    assert cli.main(["map", str(walk), "-o", str(tmp_path / "m.npz")]) == 1
    assert capsys.readouterr().err.strip() == "chmm: error: out of memory; try fewer clones or a shorter walk"
