"""A word's senses on the Communities page (app.services.senses): each clone's company and its reads in the training
text, on the sample (characters) and on a word model whose training text the session holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import SHORT_TEXT, data_uri

from app.services import UserError
from app.services import corpus as corpus_service
from app.services import graphs as graph_service
from app.services import models as model_service
from app.services import senses as sense_service
from engine import api, training
from engine.backends import model_files


def test_a_characters_clones_each_read_it_in_their_own_company(folder: Path) -> None:
    found = sense_service.word_senses(folder, "E")  # normalised as the corpus was
    model = graph_service.view_model(folder)
    clones = int(model.n_clones[model.symbol_index()["e"]])
    assert found["symbol"] == "e" and len(found["rows"]) + found["more"] == clones
    assert found["reference"] and found["decoded"] == min(found["occurrences"], 120) > 0
    assert sum(row["reads"] for row in found["rows"]) <= found["decoded"] - found["unread"]
    shares = [row["share"] for row in found["rows"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1.0 + 1e-9
    text = model.codec.normalise(api.corpora.read_text(corpus_service.config.SAMPLE_CORPUS))  # as the model read it
    for row in found["rows"]:
        assert row["label"].startswith("e:") and row["next"]
        if row["reads"]:
            example = re.fullmatch(r"…(.*)\[e\](.*)…", row["example"], flags=re.S)
            assert example and f"{example.group(1)}e{example.group(2)}".replace("\u2423", " ") in text


def test_senses_are_for_one_symbol_of_the_alphabet(folder: Path) -> None:
    with pytest.raises(UserError, match="Senses are shown for one character of the model's alphabet"):
        sense_service.word_senses(folder, "the cat")
    assert sense_service.single_symbol(graph_service.view_model(folder), "  Q ") == "q"


def test_a_word_models_senses_name_words_and_show_them_in_the_text(folder: Path, tmp_path: Path) -> None:
    corpus = api.corpora.prepare_corpus(SHORT_TEXT, unit="words")
    options = training.TrainOptions(unit="words", algorithm="em", pseudocount=1e-3, states=corpus.n_symbols + 60)
    saved = tmp_path / "words.npz"
    model_files.save_model(training.train_text(SHORT_TEXT, options, name="alice-short.txt").model, saved)
    model_service.load_model_upload(folder, data_uri(saved.read_bytes(), "application/octet-stream"), "words.npz")
    graph_service.run_communities(folder, trials=1)
    bare = sense_service.word_senses(folder, "the")
    assert not bare["reference"] and bare["decoded"] == 0 and all(row["example"] == "" for row in bare["rows"])
    corpus_service.store_corpus(folder, data_uri(SHORT_TEXT.encode("utf-8")), "renamed.txt")  # found by content
    found = sense_service.word_senses(folder, "The")
    assert found["reference"] and found["decoded"] > 0 and found["unread"] < found["decoded"]
    vocabulary = set(graph_service.view_model(folder).symbols)
    for row in found["rows"]:
        assert row["label"].startswith("the:")
        assert all(word.rsplit(" (", 1)[0] in vocabulary for word in row["next"].split(", ") if word)
        if row["reads"]:
            assert " [the] " in row["example"]


def test_the_word_search_shows_a_single_words_senses_under_its_path(folder: Path) -> None:
    import json

    import app.main  # noqa: F401  (registers the pages)
    from app import sessions
    from app.pages.community import module_map

    session = f"{folder.name}.{sessions._signature(folder.name)}"
    shown, found = module_map.find_word(1, "e", None, None, session)
    said = json.dumps(shown.to_plotly_json(), default=lambda c: c.to_plotly_json())
    assert found["clones"] and "The senses of \\u201ce\\u201d" in said and "senses-table" in said
    shown, _ = module_map.find_word(1, "the cat", None, None, session)
    assert "senses-table" not in json.dumps(shown.to_plotly_json(), default=lambda c: c.to_plotly_json())
