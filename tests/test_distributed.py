"""Batch EM over a Dask cluster (engine.training.distributed): a LocalCluster of two worker processes gives the counts
and the training of one process, survives a worker killed mid-iteration, stops on cancel, and reports a cluster that
goes away with the last good model kept."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support import FIXED

from engine import cli
from engine.backends import engines
from engine.backends.cpu import sparse
from engine.backends.cpu.implementation import DenseEngine
from engine.model.dense import CHMM, load, random_model
from engine.training import distributed, learning

pytest.importorskip("dask.distributed")

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def client():
    with distributed.open_cluster(workers=2) as client:
        yield client


def model_and_documents(seed: int = 1, sizes: tuple[int, ...] = (500, 300, 800, 120, 60, 45)) -> tuple[CHMM, list]:
    rng = np.random.default_rng(seed)
    pairs = np.array([(i, j) for i in range(3) for j in range(3) if (i, j) != (2, 0)])
    model = random_model(list("abc"), np.array([3, 4, 3]), pairs, rng, dtype=np.float64)
    docs = [DenseEngine().sample(model, n, rng) for n in sizes]
    return model, [d for d in docs if len(d) >= 2]


def test_shards_are_balanced_by_symbols() -> None:
    docs = [np.zeros(n, dtype=np.int64) for n in (900, 500, 400, 300, 200, 100, 50)]
    shards = distributed.balance(docs, 3)
    loads = sorted(sum(len(x) for x in shard) for shard in shards)
    # longest first, each to the lightest shard: within one document of the mean
    assert loads == [750, 800, 900] and sum(len(s) for s in shards) == len(docs)
    assert max(loads) <= sum(loads) / 3 + 900
    assert len(distributed.balance(docs[:2], 5)) == 2  # no empty shards


@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_sharded_counts_equal_one_process(client, form: str) -> None:
    model, docs = model_and_documents()
    host = sparse.from_dense(model) if form == "sparse" else model
    engine = engines.engine_for(host)
    local = engines.e_step_sequences(engine, host, docs)
    sharded = distributed.ClusterEStep(client, docs)(engine, host)
    np.testing.assert_allclose(sharded.counts, local.counts, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sharded.gamma_first, local.gamma_first, rtol=1e-10, atol=1e-12)
    assert sharded.log_likelihood == pytest.approx(local.log_likelihood, rel=1e-12)


def test_documents_lost_on_the_cluster_are_sent_again(client) -> None:
    """A shard whose only copy went with a worker (here: released on the scheduler, as Dask's memory manager may
    leave one copy and a worker may die with it) fails the iteration's try; the next try sends the documents anew
    and gives the counts of one process. Shards lost on every try end the retries in a ClusterError."""
    model, docs = model_and_documents(seed=4)
    engine = engines.engine_for(model)
    local = engines.e_step_sequences(engine, model, docs)
    step = distributed.ClusterEStep(client, docs)
    lost = list(step.futures)
    client.cancel(lost)
    sent, send = [], step._send_documents
    step._send_documents = lambda: sent.append(1) or send()
    again = step(engine, model)
    assert sent == [1]  # the documents were sent once more, then the iteration ran
    np.testing.assert_allclose(again.counts, local.counts, rtol=1e-10, atol=1e-12)
    assert again.log_likelihood == pytest.approx(local.log_likelihood, rel=1e-12)
    tries = []

    def gone(_: bool) -> list:
        """A fresh shard each try, released on the scheduler as a dead worker's only copy is (each key cancelled
        once: cancelling a released key again trips an assertion inside Dask's scheduler)."""
        tries.append(1)
        shards = client.scatter([docs[:1]], hash=False)
        client.cancel(shards)
        return shards

    with pytest.raises(distributed.ClusterError, match=f"{distributed.ITERATION_TRIES} times"):
        step._run(engine, model, gone, None)
    assert len(tries) == distributed.ITERATION_TRIES


@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_batch_em_on_the_cluster_is_batch_em(client, form: str) -> None:
    model, docs = model_and_documents(seed=2)
    host = sparse.from_dense(model) if form == "sparse" else model
    config = learning.TrainingConfig(iterations=6, tolerance=0.0)
    held_out = [docs[0][:100]]
    here = learning.fit(host, docs, held_out, config)
    there = learning.fit(host, docs, held_out, config, cluster=client)
    assert there.stopped == here.stopped == "max_iterations"
    mine = np.array([[r.train_bps, r.validation_bps] for r in there.history])
    theirs = np.array([[r.train_bps, r.validation_bps] for r in here.history])
    np.testing.assert_allclose(mine, theirs, rtol=1e-6)


def test_a_worker_killed_mid_iteration_changes_nothing(client) -> None:
    model, docs = model_and_documents(seed=3, sizes=tuple([6_000] * 12))
    config = learning.TrainingConfig(iterations=4, tolerance=0.0)
    here = learning.fit(model, docs, None, config)
    victim_address, victim = sorted(client.run(os.getpid).items())[0]  # one worker and its process id
    killed = threading.Event()

    def kill_during_the_next_iteration(record: learning.IterationRecord) -> None:
        if record.iteration == 1:

            def kill() -> None:
                time.sleep(0.01)
                os.kill(victim, signal.SIGKILL)
                killed.set()

            threading.Thread(target=kill, daemon=True).start()

    there = learning.fit(model, docs, None, config, callback=kill_during_the_next_iteration, cluster=client)
    assert killed.is_set() and there.stopped == "max_iterations", there.error
    np.testing.assert_allclose([r.train_bps for r in there.history], [r.train_bps for r in here.history], rtol=1e-9)
    np.testing.assert_allclose(there.model.T, here.model.T, rtol=1e-9, atol=1e-12)
    wait_for_replacement(client, victim_address)


def wait_for_replacement(client, gone: str, seconds: float = 60.0) -> None:
    """Wait until the scheduler has dropped the killed worker at ``gone`` and lists two workers that answer (the
    nanny restarts it at a new address): a scatter to every worker the scheduler lists, the dead one among them,
    would time out in the tests after this one (``wait_for_workers(2)`` returned at once while it was still
    listed, and 7 later tests failed with "did not take the data in 3 tries")."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        workers = client.scheduler_info()["workers"]
        if gone not in workers and len(workers) >= 2 and len(client.run(os.getpid)) >= 2:
            return
        time.sleep(0.2)
    pytest.fail(f"the killed worker was not replaced within {seconds:g} s: the scheduler lists {sorted(workers)}")


def test_a_worker_dying_while_the_model_is_sent_leaves_the_cluster_usable() -> None:
    """A worker that stops answering as the model is sent and then dies (a worker killed as an iteration begins, which
    the scheduler of a loaded machine still lists): the E-step gives the counts of one process on the workers left,
    and the cluster takes the next E-step. (Issue 51: the model went by ``scatter(broadcast=True)``, whose replication
    on the scheduler tried the dead worker for ever holding the scheduler's replica lock; every later broadcast
    waited, and the run failed after its 3 tries.)"""
    from distributed import utils_comm

    model, docs = model_and_documents(seed=9)
    engine = engines.engine_for(model)
    local = engines.e_step_sequences(engine, model, docs)
    with distributed.open_cluster(workers=2) as own:
        step = distributed.ClusterEStep(own, docs)  # the shards on both workers
        workers = sorted(own.run(os.getpid).items())
        # the worker the next single-item scatter does not go to (the scheduler deals them round robin over the
        # sorted addresses): under a broadcast, the live one took the model and the stopped one was to get a copy
        counter = own.run_on_scheduler(lambda: utils_comm._round_robin_counter[0])
        address, victim = workers[(counter + 1) % len(workers)]
        os.kill(victim, signal.SIGSTOP)  # listed as running, answers nothing
        killer = threading.Timer(2.0, os.kill, (victim, signal.SIGKILL))
        killer.start()
        try:
            result = step(engine, model)
        finally:
            killer.join()
        np.testing.assert_allclose(result.counts, local.counts, rtol=1e-10, atol=1e-12)
        assert result.log_likelihood == pytest.approx(local.log_likelihood, rel=1e-12)
        wait_for_replacement(own, address)
        again = distributed.ClusterEStep(own, docs)(engine, model)
        np.testing.assert_allclose(again.counts, local.counts, rtol=1e-10, atol=1e-12)


class _HangingOnce:
    """A client whose first ``tries`` scatters (only the model's, with ``model_only``: the documents and batches go
    as lists of shards) time out, as one reaching a worker that dies at that moment never returns; later ones go to
    the real client."""

    def __init__(self, client, tries: int, model_only: bool = False) -> None:
        self.client, self.tries, self.model_only, self.timeouts = client, tries, model_only, []

    def scatter(self, data, broadcast=False, timeout=None, hash=True):
        if self.model_only and isinstance(data, list):
            return self.client.scatter(data, broadcast=broadcast, timeout=timeout, hash=hash)
        self.timeouts.append(timeout)
        if len(self.timeouts) <= self.tries:
            raise TimeoutError("scatter timed out")
        return self.client.scatter(data, broadcast=broadcast, timeout=timeout, hash=hash)

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_a_scatter_that_hangs_is_tried_again_then_fails_the_run(client) -> None:
    model, docs = model_and_documents(seed=5)
    config = learning.TrainingConfig(iterations=2, tolerance=0.0)
    here = learning.fit(model, docs, None, config)
    once = _HangingOnce(client, 1)
    there = learning.fit(model, docs, None, config, cluster=once)
    assert there.stopped == "max_iterations" and once.timeouts[0] >= distributed.SCATTER_SECONDS
    np.testing.assert_allclose(there.model.T, here.model.T, rtol=1e-9, atol=1e-12)
    never = _HangingOnce(client, 10**6)
    with pytest.raises(distributed.ClusterError, match="did not take the data in 3 tries"):
        learning.fit(model, docs, None, config, cluster=never)
    assert len(never.timeouts) == distributed.SCATTER_TRIES
    # the model's scatter of every iteration too: the documents go through, the model never does
    model_never = _HangingOnce(client, 10**6, model_only=True)
    failed = learning.fit(model, docs, None, config, cluster=model_never)
    assert failed.stopped == "failed" and "did not take the data in 3 tries" in str(failed.error)
    np.testing.assert_array_equal(failed.model.T, model.T)  # the last good model: the start


def test_cancel_stops_the_cluster_work(client) -> None:
    model, docs = model_and_documents(seed=4, sizes=tuple([20_000] * 8))
    cancel = learning.CancelToken()
    config = learning.TrainingConfig(iterations=50, tolerance=0.0)
    timer = threading.Timer(0.5, cancel.cancel)
    timer.start()
    started = time.perf_counter()
    result = learning.fit(model, docs, None, config, cancel=cancel, cluster=client)
    assert result.stopped == "cancelled" and time.perf_counter() - started < 20
    assert len(result.history) < 50


def test_a_cluster_that_goes_away_fails_the_run_and_keeps_the_last_model() -> None:
    model, docs = model_and_documents(seed=5, sizes=tuple([20_000] * 6))
    with distributed.open_cluster(workers=1) as own:
        config = learning.TrainingConfig(iterations=200, tolerance=0.0)

        def stop_the_cluster(record: learning.IterationRecord) -> None:
            if record.iteration == 2:
                own.cluster.close()

        result = learning.fit(model, docs, None, config, callback=stop_the_cluster, cluster=own)
    assert result.stopped == "failed" and "ClusterError" in result.error
    assert 2 <= len(result.history) < 200 and np.all(np.isfinite(result.model.T))


@pytest.mark.slow
def test_chmm_train_with_local_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.npz"
    args = [
        "train",
        str(DATA / "blake-poems.txt"),
        "-o",
        str(out),
        "--states",
        "60",
        *FIXED,
        "--iterations",
        "3",
        "--quiet",
        "--prune-bound",
        "0",  # T as trained: the files compare the cluster's EM with one process's, not the pruning of each
    ]
    assert cli.main([*args, "--workers", "2"]) == 0, capsys.readouterr().err
    here = tmp_path / "here.npz"
    assert cli.main([*args[:3], str(here), *args[4:]]) == 0
    np.testing.assert_allclose(load(out).T, load(here).T, rtol=1e-5, atol=1e-7)
    chunked = tmp_path / "chunked.npz"
    assert cli.main([*args[:3], str(chunked), *args[4:], "--workers", "2", "--chunk", "2000", "--burn-in", "500"]) == 0
    assert load(chunked).metadata["settings"]["chunk"] == 2000
    np.testing.assert_allclose(load(chunked).T, load(here).T, rtol=1e-3, atol=1e-5)
    assert cli.main([*args, "--workers", "2", "--algorithm", "viterbi"]) == 1
    assert "runs batch or online EM" in capsys.readouterr().err
    assert cli.main([*args, "--chunk", "2000"]) == 1
    assert "lockstep passes on the GPU (--backend gpu)" in capsys.readouterr().err
    assert cli.main([*args, "--cluster", "tcp://127.0.0.1:9"]) == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in capsys.readouterr().err


def test_app_training_jobs_use_the_cluster_of_dask_scheduler_address(
    client, with_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With DASK_SCHEDULER_ADDRESS set, a batch-EM training job of the app runs its E-steps on that cluster (the
    scheduler counts the tasks) and gives the model the job's own process gives; the Train page says where."""
    from support import TINY_FORM

    from app import forms, jobs, sessions
    from app.services import training_jobs
    from engine.backends import model_files

    form = TINY_FORM
    assert "background job's process" in training_jobs.cluster_note()
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(form))
    assert outcome.status == jobs.FINISHED, outcome.message
    here = model_files.load_model(sessions.current_model_path(with_corpus))
    address = client.scheduler.address
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", address)
    assert address in training_jobs.cluster_note()
    tasks_before = len(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.transition_log)))
    outcome = training_jobs.run_training_job(with_corpus, forms.options_from_form(form))
    assert outcome.status == jobs.FINISHED, outcome.message
    tasks_after = len(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.transition_log)))
    assert tasks_after > tasks_before
    there = model_files.load_model(sessions.current_model_path(with_corpus))
    np.testing.assert_allclose(there.T, here.T, rtol=1e-5, atol=1e-7)


def test_chunks_cover_every_step_once() -> None:
    x = np.arange(10_001) % 3
    pieces = distributed.chunk([x, x[:50]], size=3_000, burn_in=200)
    chunks = [p for p in pieces if isinstance(p, distributed.Chunk)]
    assert len(chunks) == 4 and sum(len(p) for p in chunks) == len(x) - 1
    assert [p.first for p in chunks] == [True, False, False, False]
    assert all(p.lo <= 200 and len(p.x) - 1 - p.hi <= 200 for p in chunks)
    assert any(p is not None and not isinstance(p, distributed.Chunk) and len(p) == 50 for p in pieces)


@pytest.mark.parametrize(("burn_in", "exact"), [(400, True), (0, False)])
def test_a_chunked_document_with_a_burn_in_gives_its_counts(client, burn_in: int, exact: bool) -> None:
    """The counts of a long document cut into chunks: with a burn-in the messages settle and the counts are those of
    the whole document (this model forgets its start within a few steps); without one, the chunks' starts show."""
    model, _ = model_and_documents(seed=6)
    x = DenseEngine().sample(model, 6_000, np.random.default_rng(6))
    engine = engines.engine_for(model)
    whole = engine.e_step(model, x)
    step = distributed.ClusterEStep(client, [x], chunk=1_000, burn_in=burn_in)
    chunked = step(engine, model)
    difference = np.abs(chunked.counts - whole.counts).max() / whole.counts.max()
    assert (difference < 1e-9) == exact, difference
    assert chunked.log_likelihood == pytest.approx(whole.log_likelihood, rel=1e-9 if exact else 1e-2)
    np.testing.assert_allclose(chunked.gamma_first, whole.gamma_first, rtol=1e-9, atol=1e-12)


def test_chunks_are_for_dense_models() -> None:
    model, docs = model_and_documents(seed=7, sizes=(3_000,))
    with distributed.open_cluster(workers=1) as own:
        config = learning.TrainingConfig(iterations=2, chunk=500)
        result = learning.fit(sparse.from_dense(model), docs, None, config, cluster=own)
    assert result.stopped == "failed" and "chunks with a burn-in run on dense models" in result.error


@pytest.mark.parametrize("chunk", [None, 10_000])
def test_online_em_on_the_cluster_is_online_em(client, chunk: int | None) -> None:
    """Each batch's E-step split over the workers (one piece per worker with a burn-in, or one piece when the chunk
    holds the batch), batches in order, the forward message carried from batch to batch: the same online EM."""
    model, docs = model_and_documents(seed=8, sizes=(3_000, 1_500))
    config = learning.TrainingConfig(
        algorithm="online", iterations=3, tolerance=0.0, batch_size=500, chunk=chunk, burn_in=200
    )
    here = learning.fit(model, docs, None, config)
    there = learning.fit(model, docs, None, config, cluster=client)
    assert there.stopped == "max_iterations", there.error
    np.testing.assert_allclose([r.train_bps for r in there.history], [r.train_bps for r in here.history], rtol=1e-9)
    np.testing.assert_allclose(there.model.T, here.model.T, rtol=1e-8, atol=1e-12)
    viterbi = learning.TrainingConfig(algorithm="viterbi", iterations=1)
    with pytest.raises(ValueError, match="batch or online EM"):
        learning.fit(model, docs, None, viterbi, cluster=client)
