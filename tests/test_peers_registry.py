"""The learners' registry: every front end's table of learners comes from one registration per learner."""

from __future__ import annotations

import pytest

from app.services import learner_settings
from engine import api
from engine.peers import learners, registry


def test_every_learner_is_registered_once_and_the_front_ends_read_the_registry() -> None:
    table = registry.registered()
    assert set(table) == set(api.LEARNERS) and api.LEARNERS[0] == "chmm"
    for kind in api.LEARNERS:
        entry = table[kind]
        assert learner_settings.LEARNER_LABELS[kind] == entry.label
        assert learner_settings.SHORT_NAMES[kind] == entry.short
        assert learner_settings.LEARNER_COLOURS[kind] == entry.colour
        assert learner_settings.SETTINGS[kind] == entry.settings
        for setting in entry.settings:
            assert setting.low <= setting.default <= setting.high
        if kind != "chmm":
            assert learners.learner_class(kind).kind == kind
            assert learners.DEFAULT_OPTIONS[kind] == entry.defaults
    assert len({table[k].colour for k in api.LEARNERS}) == len(api.LEARNERS)


def test_a_name_registered_twice_is_refused_and_a_missing_library_is_said_in_one_sentence() -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.Learner("ngram", "another n-gram", "n-gram", "#000000"))
    ghost = registry.Learner("ghost", "Ghost learner", "ghost", "#000001", requires="no_such_module_here",
                             install="pip install ghost")  # fmt: skip
    registry.register(ghost)
    try:
        sentence = registry.available("ghost")
        assert sentence is not None and "no_such_module_here" in sentence and sentence.endswith("pip install ghost")
        assert registry.available("ngram") is None
    finally:
        registry._REGISTERED.pop("ghost")


def test_the_estimate_scales_each_setting_by_its_cost_power() -> None:
    base = learner_settings.estimate_seconds("hmm", {"n_states": 100}, 106_910)
    assert base == pytest.approx(50.0)
    assert learner_settings.estimate_seconds("hmm", {"n_states": 200}, 106_910) == pytest.approx(200.0)
    assert learner_settings.estimate_seconds("ngram", {"max_order": 16}, 106_910) == pytest.approx(0.8)
