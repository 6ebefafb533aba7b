"""A recurrent network peer (the paper's LSTM column; kind "rnn"): a character- or token-level GRU (or LSTM,
``cell="lstm"``) trained with truncated backpropagation through time, as Karpathy's char-rnn and its PyTorch port
train theirs.

The network reads the previous symbol (a start symbol before the first) through an embedding, runs ``layers``
recurrent layers of ``hidden`` units and a linear layer to the alphabet, so that softmax gives P(x_n | x_<n).
Training cuts the text into ``batch`` contiguous streams, walks them ``chunk`` symbols at a time carrying the state
(detached at each chunk's start), and takes an Adam step per chunk on the mean cross-entropy, gradients clipped to
``clip``. After every epoch the validation text is scored exactly (one stream, the whole past) and the parameters
with the best validation BPS are kept; each epoch without improvement multiplies the step size by ``decay``, and
training stops after ``patience`` such epochs, at ``epochs``, or when ``minutes`` of training have passed. Dropout
(``dropout``) between layers. There is no refit on training + validation text: the schedule validation steered
cannot be replayed without it, so the network kept is the one validation chose (as char-rnn keeps its best
checkpoint). Its training BPS is that epoch's mean over its chunks (dropout on), kept as it trained: scoring
the training text again would cost as much as an epoch. It runs on a GPU where ``device`` asks for one and PyTorch
sees it.

PyTorch is an optional extra (``pip install -e ".[rnn]"``), imported only when a network is built: it installs as
one wheel (the CPU build; JAX with optax would be about 600 MB, and numba would need a backpropagation of our own)
and runs on a GPU with no code of ours. The default cell is the GRU because it measured better: on Alice, 2 cores,
2 layers of 256 units, dropout 0.3, the GRU reached validation BPS 1.737 (test 1.567) in 24 epochs of 6.1 s and the
LSTM 1.756 (test 1.606) in 27 epochs of 5.1 s. The model is saved as its tensors in an .npz (no pickle).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.errors import CHMMError
from engine.peers import registry
from engine.peers.base import PeerFormatError, as_symbols, load_arrays, save_arrays

__all__ = ["CELLS", "RecurrentLearner"]

CELLS = ("lstm", "gru")
ACCELERATOR = {"auto": None, "cpu": False, "cuda": True}
"""Whether each ``device`` choice runs on a CUDA device (None: where PyTorch sees one)."""
DEVICES = tuple(ACCELERATOR)
SCORE_CHUNK = 4096


def _whole(value: Any, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise CHMMError(f"{what} must be a whole number of at least {minimum}, got {value!r}")
    return int(value)


def _positive(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CHMMError(f"{what} must be a positive number, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise CHMMError(f"{what} must be a positive number, got {value!r}")
    return number


def _network(n_symbols: int, embedding: int, hidden: int, layers: int, cell: str, dropout: float) -> Any:
    """The embedding, recurrent layers and output layer as one torch module (torch imported here)."""
    import torch

    class Network(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(n_symbols + 1, embedding)
            recurrent = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
            self.rnn = recurrent(embedding, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
            self.out = torch.nn.Linear(hidden, n_symbols)

        def forward(self, inputs: Any, state: Any = None) -> tuple[Any, Any]:
            outputs, state = self.rnn(self.embed(inputs), state)
            return self.out(outputs), state

    return Network()


def _detach(state: Any) -> Any:
    if state is None:
        return None
    return tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()


class RecurrentLearner:
    """An LSTM or GRU language model (kind "lstm"; module docstring). ``hidden`` units in each of ``layers`` layers,
    an ``embedding`` of each symbol, truncated backpropagation over ``chunk`` symbols in ``batch`` streams, Adam at
    ``learning_rate``, at most ``epochs`` epochs and ``minutes`` of training (None: no limit), ``seed`` for the
    start and the streams. ``history`` records each epoch (iteration, train_bps on the chunks seen, validation_bps,
    seconds)."""

    kind = "rnn"

    def __init__(
        self,
        cell: str = "gru",
        hidden: int = 256,
        layers: int = 2,
        embedding: int = 32,
        chunk: int = 100,
        batch: int = 32,
        learning_rate: float = 2e-3,
        epochs: int = 50,
        patience: int = 3,
        minutes: float | None = None,
        dropout: float = 0.3,
        decay: float = 0.5,
        clip: float = 5.0,
        seed: int = 0,
        device: str = "auto",
    ) -> None:
        if cell not in CELLS:
            raise CHMMError(f"cell must be one of {', '.join(CELLS)}, got {cell!r}")
        if device not in DEVICES:
            raise CHMMError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        self.cell, self.device = cell, device
        self.hidden, self.layers = _whole(hidden, "hidden"), _whole(layers, "layers")
        self.embedding, self.chunk, self.batch = (
            _whole(embedding, "embedding"),
            _whole(chunk, "chunk"),
            _whole(batch, "batch"),
        )
        self.epochs, self.patience, self.seed = (
            _whole(epochs, "epochs"),
            _whole(patience, "patience"),
            _whole(seed, "seed", 0),
        )
        self.learning_rate, self.clip = _positive(learning_rate, "learning_rate"), _positive(clip, "clip")
        self.minutes = None if minutes is None else _positive(minutes, "minutes")
        if not (0.0 <= float(dropout) < 1.0):
            raise CHMMError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        if not (0.0 < float(decay) <= 1.0):
            raise CHMMError(f"decay must be in (0, 1], got {decay!r}")
        self.decay = float(decay)
        self.n_symbols: int | None = None
        self.history: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {}
        self.progress: Callable[[dict[str, Any]], None] | None = None
        self.cancel: Any = None  # an engine.training.learning.CancelToken, checked every chunk
        self.train_bps_: float | None = None  # the kept epoch's mean training BPS (dropout on), as it trained
        self.cancelled_ = False
        self._net: Any = None

    # ------------------------------------------------------------------------------------------------ training
    def _torch_device(self) -> Any:
        import torch

        asked = ACCELERATOR[self.device]
        accelerated = torch.cuda.is_available() if asked is None else asked
        if accelerated and not torch.cuda.is_available():
            raise CHMMError("device cuda was asked for, but PyTorch sees no CUDA device here")
        return torch.device("cuda" if accelerated else "cpu")

    def _build(self, n_symbols: int) -> Any:
        import torch

        torch.manual_seed(self.seed)
        net = _network(n_symbols, self.embedding, self.hidden, self.layers, self.cell, self.dropout)
        return net.to(self._torch_device())

    def _streams(self, x: np.ndarray) -> tuple[Any, Any]:
        """Inputs (previous symbol, the start symbol first) and targets cut into ``batch`` contiguous streams."""
        import torch

        inputs = np.concatenate([[self.n_symbols], x[:-1]])
        streams = max(1, min(self.batch, x.size // self.chunk))
        length = x.size // streams
        shape = (streams, length)
        device = self._torch_device()
        as_tensor = lambda a: torch.as_tensor(a[: streams * length].reshape(shape), device=device)  # noqa: E731
        return as_tensor(inputs), as_tensor(x)

    def fit(self, train: np.ndarray, n_symbols: int, validation: np.ndarray | None = None) -> RecurrentLearner:
        """Train on ``train`` (symbol indices in [0, n_symbols)) as the module docstring says; with ``validation``
        the parameters of the best validation epoch are kept. Returns self."""
        import torch

        n_symbols = _whole(n_symbols, "n_symbols")
        x = as_symbols(train, n_symbols, "train")
        if x.size < 2:
            raise CHMMError("the training text needs at least 2 symbols")
        val = None if validation is None else as_symbols(validation, n_symbols, "validation", allow_empty=True)
        self.n_symbols = n_symbols
        self.cancelled_ = False
        torch.set_num_threads(max(1, os.cpu_count() or 1))
        self._net = self._build(n_symbols)
        optimiser = torch.optim.Adam(self._net.parameters(), lr=self.learning_rate)
        inputs, targets = self._streams(x)
        started, best, best_state, waited = time.perf_counter(), math.inf, None, 0
        self.history = []
        for epoch in range(1, self.epochs + 1):
            train_bps = self._epoch(inputs, targets, optimiser, started)
            record: dict[str, Any] = {"iteration": epoch, "train_bps": train_bps, "validation_bps": None}
            if val is not None and val.size:
                record["validation_bps"] = float(-np.mean(np.log2(self.predictive(val))))
            record["seconds"] = time.perf_counter() - started
            self.history.append(record)
            if self.progress is not None:
                self.progress(record)
            score = record["validation_bps"]
            if score is not None and score < best - 1e-6:
                best, waited = score, 0
                best_state = {k: v.detach().clone() for k, v in self._net.state_dict().items()}
            elif score is not None:
                waited += 1
                for group in optimiser.param_groups:  # a plateau: smaller steps from here
                    group["lr"] *= self.decay
            if waited >= self.patience or self._out_of_time(started):
                break
        if best_state is not None:
            self._net.load_state_dict(best_state)
        kept = min(self.history, key=lambda h: h["validation_bps"] or math.inf) if best_state else self.history[-1]
        self.train_bps_ = kept["train_bps"]
        return self

    def _out_of_time(self, started: float) -> bool:
        """Whether training must stop: its minutes are spent, or its cancel token was set (``cancelled_``)."""
        if self.cancel is not None and self.cancel.cancelled:
            self.cancelled_ = True
        return self.cancelled_ or (self.minutes is not None and time.perf_counter() - started >= 60.0 * self.minutes)

    def _epoch(self, inputs: Any, targets: Any, optimiser: Any, started: float) -> float:
        """One pass over the streams in chunks (truncated backpropagation); the mean training BPS of the chunks."""
        import torch

        self._net.train()
        state, total, count = None, 0.0, 0
        for start in range(0, inputs.shape[1], self.chunk):
            logits, state = self._net(inputs[:, start : start + self.chunk], _detach(state))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     targets[:, start : start + self.chunk].reshape(-1))  # fmt: skip
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self._net.parameters(), self.clip)
            optimiser.step()
            total += float(loss.detach()) * logits.shape[0] * logits.shape[1]
            count += logits.shape[0] * logits.shape[1]
            if self._out_of_time(started):
                break
        return total / max(count, 1) / math.log(2)

    def chunk_loss(self, inputs: np.ndarray, targets: np.ndarray) -> Any:
        """The summed cross-entropy in nats of ``targets`` given ``inputs`` (arrays of shape streams x length) from a
        zero state: the loss each training step differentiates."""
        import torch

        device = self._torch_device()
        logits, _ = self._net(torch.as_tensor(inputs, device=device))
        flat = torch.as_tensor(targets, device=device).reshape(-1)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), flat, reduction="sum")

    # ------------------------------------------------------------------------------------------------ scoring
    def _require_fitted(self) -> int:
        if self.n_symbols is None or self._net is None:
            raise RuntimeError("the recurrent network is not trained yet")
        return self.n_symbols

    def predictive(self, x: np.ndarray) -> np.ndarray:
        """P(x_n | x_<n) for every position of ``x``, one stream over the whole past (float64, at least 1e-300)."""
        import torch

        v = self._require_fitted()
        x = as_symbols(x, v, "x")
        inputs = np.concatenate([[v], x[:-1]])
        device = self._torch_device()
        self._net.eval()
        out = np.empty(x.size)
        state = None
        with torch.no_grad():
            for start in range(0, x.size, SCORE_CHUNK):
                step = torch.as_tensor(inputs[None, start : start + SCORE_CHUNK], device=device)
                logits, state = self._net(step, state)
                logp = torch.log_softmax(logits[0].double(), dim=-1)
                picked = torch.as_tensor(x[start : start + SCORE_CHUNK], device=device)
                out[start : start + SCORE_CHUNK] = logp.gather(1, picked[:, None])[:, 0].cpu().numpy()
        return np.maximum(np.exp(out), 1e-300)

    @property
    def n_parameters(self) -> int:
        """The network's weights and biases."""
        self._require_fitted()
        return int(sum(p.numel() for p in self._net.parameters()))

    # ------------------------------------------------------------------------------------------------ files
    def _options(self) -> dict[str, Any]:
        names = ("cell", "hidden", "layers", "embedding", "chunk", "batch", "learning_rate", "epochs", "patience",
                 "minutes", "dropout", "decay", "clip", "seed", "device")  # fmt: skip
        return {name: getattr(self, name) for name in names}

    def save(self, path: str | Any, metadata: dict[str, Any] | None = None) -> None:
        """Write the network's tensors (float32) as .npz and the options, history and ``metadata`` as its header."""
        v = self._require_fitted()
        arrays = {name.replace(".", "__"): t.detach().cpu().numpy() for name, t in self._net.state_dict().items()}
        header = {"n_symbols": v, "options": self._options(), "history": self.history, "metadata": metadata or {}}
        save_arrays(path, self.kind, arrays, header)

    @classmethod
    def load(cls, path: str | Any) -> RecurrentLearner:
        """Read a network written by :meth:`save` (PyTorch needed) onto a GPU where PyTorch sees one, else the CPU;
        PeerFormatError if the file is not one."""
        import torch

        arrays, header = load_arrays(path, cls.kind)
        try:
            model = cls(**(dict(header["options"]) | {"device": "auto"}))  # trained on a GPU, read anywhere
            model.n_symbols = _whole(header["n_symbols"], "n_symbols")
            model._net = model._build(model.n_symbols)
            state = {name.replace("__", "."): torch.as_tensor(a) for name, a in arrays.items()}
            model._net.load_state_dict(state)
            model.history = list(header.get("history", []))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise PeerFormatError(f"{path}: damaged recurrent network ({exc})") from exc
        return model


registry.register(
    registry.Learner(
        "rnn",
        "Recurrent network (char-rnn)",
        "RNN",
        "#17becf",
        factory="engine.peers.rnn:RecurrentLearner",
        defaults={"minutes": 10.0},
        settings=(
            registry.Setting("hidden", "hidden units", 256, 8, 2048, cost_power=2),
            registry.Setting("minutes", "minutes at most", 10, 1, 600, shown="at most {value:g} min", cost_power=0),
        ),
        seconds_per_symbol=110.0 / 106_910,
        iterations_option="epochs",
        seed_option="seed",
        budget_option="minutes",
        requires="torch",
        install='pip install -e ".[rnn]" adds PyTorch.',
        on_device=True,
        picked=False,
    )
)
