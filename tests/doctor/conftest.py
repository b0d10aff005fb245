"""Every doctor test runs on one torch thread, as the scripts the doctor tests run in subprocesses do: on a loaded
2-core machine OpenMP's second thread spins for milliseconds per operator (a tiny model's step went from one
millisecond to a hundred, from run to run). What the tests check does not depend on the threads: counts, parts timed
on fake clocks or sleeps, and verdicts that read times, which the spinning stretches."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
