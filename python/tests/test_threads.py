"""Threads: set_num_threads / get_num_threads, the GIL released while the library runs
(another Python thread makes progress during a long call), and concurrent calls from
several Python threads giving the serial results bit for bit."""

import threading
import time

import numpy as np
import pytest

import tensorattn as ta
from conftest import randn


@pytest.fixture
def one_thread():
    n = ta.get_num_threads()
    ta.set_num_threads(1)
    yield
    ta.set_num_threads(n)


def test_set_and_get():
    n = ta.get_num_threads()
    assert n >= 1
    ta.set_num_threads(3)
    assert ta.get_num_threads() == 3
    ta.set_num_threads(n)
    assert ta.get_num_threads() == n
    with pytest.raises(ValueError):
        ta.set_num_threads(-1)
    with pytest.raises(TypeError):
        ta.set_num_threads("two")


def test_gil_is_released(one_thread):
    """While one thread runs a long SDPA (~0.1 s or more), a pure-Python loop in another
    thread keeps running: with the GIL held it could not take a step until the call
    returned."""
    q = randn(1, 4, 2048, 64, seed=1).numpy()
    ta.scaled_dot_product_attention(q, q, q)  # warm up (scratch, thread pool)
    window, ticks, stop = {}, [], threading.Event()

    def call():
        window["start"] = time.perf_counter()
        ta.scaled_dot_product_attention(q, q, q)
        window["end"] = time.perf_counter()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    spinner.start()
    time.sleep(0.01)
    worker = threading.Thread(target=call)
    worker.start()
    worker.join()
    stop.set()
    spinner.join()
    start, end = window["start"], window["end"]
    margin = (end - start) * 0.2
    inside = [t for t in ticks if start + margin < t < end - margin]
    assert end - start > 0.02, "the call was too short to tell"
    assert len(inside) > 100, (len(inside), end - start)


def test_concurrent_calls_match_serial():
    problems = [[randn(2, 4, 33, 16, seed=10 * i + j).numpy() for j in range(3)]
                for i in range(6)]
    serial = [ta.scaled_dot_product_attention(*p, is_causal=True) for p in problems]
    results = [None] * len(problems)

    def run(i):
        for _ in range(20):
            results[i] = ta.scaled_dot_product_attention(*problems[i], is_causal=True)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(problems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(results, serial):
        assert np.array_equal(a, b)
