"""The recurrent network peer: gradients against finite differences, a deterministic text learned, files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.peers import learners
from engine.peers.base import bits_per_symbol

torch = pytest.importorskip("torch")

from engine.peers.rnn import RecurrentLearner  # noqa: E402


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_training_loss_gradient_matches_finite_differences(cell: str) -> None:
    learner = RecurrentLearner(cell=cell, hidden=3, layers=2, embedding=2, seed=1, dropout=0.0)
    learner.n_symbols = 4
    learner._net = learner._build(4).double()
    rng = np.random.default_rng(0)
    inputs, targets = rng.integers(0, 5, size=(2, 7)), rng.integers(0, 4, size=(2, 7))
    loss = learner.chunk_loss(inputs, targets)
    loss.backward()
    for name, parameter in learner._net.named_parameters():
        flat, grad = parameter.data.view(-1), parameter.grad.view(-1)
        for index in rng.choice(flat.numel(), size=min(3, flat.numel()), replace=False):
            keep = float(flat[index])
            step = 1e-6
            flat[index] = keep + step
            up = float(learner.chunk_loss(inputs, targets))
            flat[index] = keep - step
            down = float(learner.chunk_loss(inputs, targets))
            flat[index] = keep
            assert (up - down) / (2 * step) == pytest.approx(float(grad[index]), rel=1e-5, abs=1e-8), name


def test_a_deterministic_text_is_learned_to_near_zero_bits() -> None:
    cycle = np.tile(np.array([0, 1, 2, 3, 1, 4]), 300)
    learner = RecurrentLearner(hidden=24, layers=1, embedding=8, chunk=24, batch=8, epochs=60, patience=60,
                               learning_rate=1e-2)  # fmt: skip
    learner.fit(cycle[:1500], 5, cycle[1500:])
    assert bits_per_symbol(learner, cycle[1500:]) < 0.05
    assert learner.history[0]["validation_bps"] > 1.0


def test_the_network_saves_without_pickle_and_loads_the_same(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 6, size=600)
    learner = RecurrentLearner(hidden=8, layers=1, embedding=4, chunk=20, batch=4, epochs=2).fit(x[:500], 6, x[500:])
    path = tmp_path / "rnn.npz"
    learners.save_learner(learner, path)
    with np.load(path, allow_pickle=False) as archive:
        assert all(archive[name].dtype != object for name in archive.files)
    again = learners.load_any(path)
    np.testing.assert_allclose(again.predictive(x[500:]), learner.predictive(x[500:]), rtol=1e-6)
    assert again.n_parameters == learner.n_parameters and len(again.history) == 2
    with pytest.raises(ValueError, match="cell must be one of"):
        learners.make_learner("rnn", cell="tree")


def test_training_reports_each_epoch_and_stops_when_cancelled() -> None:
    from engine.training.learning import CancelToken

    corpus = "the cat sat on the mat and the dog sat on the log " * 40
    lines: list[str] = []
    options = {"hidden": 8, "layers": 1, "embedding": 4, "epochs": 3, "chunk": 20, "batch": 4}
    learners.train_peer_text(corpus, "rnn", options, log=lines.append, refit=False)
    assert sum(line.startswith("epoch ") and "validation BPS" in line for line in lines) == 3
    token = CancelToken()
    token.cancel()
    with pytest.raises(learners.TrainingStopped, match="cancelled"):
        learners.train_peer_text(corpus, "rnn", options | {"epochs": 50}, cancel=token)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")
def test_on_a_gpu_the_network_trains_and_predicts_as_it_would_on_the_cpu(tmp_path: Path) -> None:
    x = np.tile(np.array([0, 1, 2, 1]), 200)
    learner = RecurrentLearner(hidden=16, layers=1, embedding=4, chunk=20, batch=4, epochs=3, device="cuda")
    learner.fit(x[:600], 3, x[600:])
    assert next(learner._net.parameters()).is_cuda
    learners.save_learner(learner, tmp_path / "gpu.npz")
    on_cpu = RecurrentLearner.load(tmp_path / "gpu.npz")
    assert on_cpu.device == "auto"
    on_cpu.device = "cpu"
    on_cpu._net = on_cpu._net.cpu()
    np.testing.assert_allclose(on_cpu.predictive(x[600:]), learner.predictive(x[600:]), rtol=1e-4)
