"""worker_memory (findings/kinds/worker_memory.py, observe/worker_memory.py): the Dataset's Python objects measured
against an exact count; the copy-on-read projection against hand-derived figures, with and without batches
prefetched ahead of the loop; the reader's baseline reading taken as soon as every worker handed over a batch; and
end to end, the projection from the doctor's default watched steps, and from the first batches of a plain loop,
against what the workers reach at the end of the epoch."""

import dataclasses
import os
import statistics
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest
import torch
from observations import by_kind, host, on_cpu, steps

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.kinds.worker_memory import IN_FLIGHT_READ, project
from gpufeed.doctor.findings.report import verdict_headline
from gpufeed.doctor.observation import DatasetAttribute, WorkerMemoryReading
from gpufeed.doctor.observe import worker_memory as observe_memory
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.observe.worker_memory import WorkerMemory, dataset_objects, private_bytes

SCRIPTS = Path(__file__).parent / "scripts"
MIB = 2**20


class Held:
    def __init__(self):
        self.items = [(f"/data/{index:06d}.jpg", 1000 + index) for index in range(5000)]
        self.classes = {index: f"class {index}" for index in range(2000)}
        self.small = [1, 2, 3]  # fewer than MANY_OBJECTS: not counted
        self.array = torch.zeros(10_000)  # data outside Python objects: not counted


def test_the_dataset_s_objects_against_an_exact_count():
    held = Held()
    found = {a.name: a for a in dataset_objects(held)}
    assert set(found) == {"items", "classes"}
    def block(value) -> int:  # pymalloc's block for an object of that size: 16-byte steps up to 512 bytes
        return -(-sys.getsizeof(value) // 16) * 16
    exact = sum(block(item) + block(item[0]) + block(item[1]) for item in held.items)
    assert found["items"].length == 5000 and found["items"].type == "list"
    assert found["items"].bytes == pytest.approx(exact, rel=0.02)  # 2,000 of 5,000 items sampled, scaled
    # a dict's items as (key, value) pairs: the values' strings and the keys past the cached small ints, exactly
    exact = sum(block(value) + (0 if -5 <= key <= 256 else block(key)) for key, value in held.classes.items())
    assert found["classes"].bytes == exact  # the first 2,000 of a dict's items: all of them here


def reading(growth_mib: float, batches: int, *, objects_mib: float = 400.0, samples: int = 1_000_000,
            available_mib: float = 20_000.0, workers: int = 2) -> WorkerMemoryReading:
    """Readings every 10 batches; each worker grows from 40 MiB by `growth_mib` over `batches` past start-up."""
    rows = []
    for index in range(batches // 10 + 1):
        done = 10 * index
        grown = int((40 + growth_mib * done / batches) * MIB)
        rows.append((0.1 * index, workers + 1 + done, 200 * MIB, (grown, grown)))
    attributes = (DatasetAttribute("items", "list", samples, int(objects_mib * MIB)),) if objects_mib else ()
    return WorkerMemoryReading(tuple(rows), workers, samples, samples // 256, 256, attributes,
                               int(available_mib * MIB), 1)


def _samples_a_page(grown: float, k_base: float, k_now: float, samples: int) -> float:
    """s with (1 - k_base/N)^s - (1 - k_now/N)^s = grown, by a dense grid (independent of the module's bisection)."""
    grid = numpy.exp(numpy.linspace(numpy.log(0.01), numpy.log(1e4), 2_000_001))
    difference = (1 - k_base / samples) ** grid - (1 - k_now / samples) ** grid
    rising = grid <= grid[numpy.argmax(difference)]
    return float(grid[rising][numpy.argmin(abs(difference[rising] - grown))])


def test_the_copy_on_read_projection_is_hand_derived():
    # the baseline is the reading at batch 3 (both workers handed over a batch), the last at batch 53: each worker
    # has read 3 x 256 / 2 = 384 and then 6,784 of the 1,000,000 samples, and grew 40 MiB of the 400 MiB of
    # objects between: s solves 0.1 = (1 - 384e-6)^s - (1 - 6784e-6)^s; at the epoch's end each has read 500,000
    found = project(reading(40.0, 50))
    s = _samples_a_page(0.1, 384, 6784, 1_000_000)
    copied = lambda reads: 1 - (1 - reads / 1_000_000) ** s  # noqa: E731
    assert found.start_bytes == 40 * MIB and found.now_bytes == 80 * MIB
    assert found.projected_worker_bytes == pytest.approx((80 + 400 * (copied(500_000) - copied(6784))) * MIB,
                                                         rel=1e-4)
    assert found.projected_total_bytes == 2 * found.projected_worker_bytes
    assert found.growth_per_1000_batches == pytest.approx(800 * MIB)
    assert f"fits {s:.1f} samples a page" in found.how and found.runs_out_at_batch is None
    # with 500 MiB available the 2 workers cannot add what they would: the RAM is full when each has copied
    # copied(6784) + 250 / 400 of the objects, after N x (1 - (1 - that)^(1/s)) reads, 2 x 256 of them a batch
    tight = project(reading(40.0, 50, available_mib=500.0))
    reads = 1_000_000 * (1 - (1 - copied(6784) - 250 / 400) ** (1 / s))
    assert tight.runs_out_at_batch == pytest.approx(reads * 2 / 256, abs=2)
    # no attribute to bound it: the straight line, said to be an upper estimate
    line = project(reading(40.0, 50, objects_mib=0.0))
    assert "straight line" in line.how and line.projected_worker_bytes == pytest.approx(
        80 * MIB + 800 * MIB * (1_000_000 // 256 - 53) / 1000, rel=1e-6)


def test_the_batches_prefetched_ahead_of_the_loop_are_counted_half_read():
    # the loader hands each of the 2 workers prefetch_factor = 2 batches ahead of the loop: IN_FLIGHT_READ (half)
    # of those 4 batches count as read, so the readings at batches 3 and 53 are reads (3 + 2) x 256 / 2 = 640 and
    # (53 + 2) x 128 = 7,040 of each worker; the epoch's end is still 500,000
    assert IN_FLIGHT_READ == 0.5
    found = project(dataclasses.replace(reading(40.0, 50), prefetch_factor=2))
    s = _samples_a_page(0.1, 640, 7040, 1_000_000)
    copied = lambda reads: 1 - (1 - reads / 1_000_000) ** s  # noqa: E731
    assert found.projected_worker_bytes == pytest.approx((80 + 400 * (copied(500_000) - copied(7040))) * MIB,
                                                         rel=1e-4)
    assert f"from its read 640 to its read 7,040 of 500,000 fits {s:.1f} samples a page" in found.how
    # counting none of them read would fit fewer samples a page to the same growth and project more: the error
    # that moved with the load (how far ahead the workers ran)
    assert found.projected_worker_bytes < project(reading(40.0, 50)).projected_worker_bytes
    # the batch at which the RAM is full, back from reads to the loop's batches: 2 batches fewer than the reads say
    tight = project(dataclasses.replace(reading(40.0, 50, available_mib=500.0), prefetch_factor=2))
    reads = 1_000_000 * (1 - (1 - copied(7040) - 250 / 400) ** (1 / s))
    assert tight.runs_out_at_batch == pytest.approx(reads * 2 / 256 - 2, abs=1)  # int() drops under 1


def test_the_baseline_is_read_as_soon_as_every_worker_has_handed_over_a_batch(monkeypatch):
    """The reading at the baseline (the first after batch `workers`) is taken at that batch, not on the next tick
    of the interval: with the interval made an hour long, only that wake-up can take it."""
    monkeypatch.setattr(observe_memory, "INTERVAL_S", 3600.0)
    this = SimpleNamespace(pid=os.getpid())  # two "workers": this process, whose USS can be read
    iterator = SimpleNamespace(_workers=[this, this], _dataset=None, _prefetch_factor=2)
    memory = WorkerMemory()

    def batches_read(count: int) -> list[int]:  # the readings' batch counts once there are `count` of them
        arrived = threading.Event()
        for _ in range(6000):  # a minute at most: the reader runs at once, this only waits for its thread
            samples = memory.reading().samples
            if len(samples) >= count:
                return [sample[1] for sample in samples]
            arrived.wait(0.01)
        raise AssertionError(f"fewer than {count} readings: {memory.reading().samples}")

    memory.on_training_batch(iterator)  # batch 1: the reader starts, reads once, then waits for the interval
    assert batches_read(1) == [1]
    memory.on_training_batch(iterator)
    assert batches_read(1) == [1]  # batch 2: no reading
    memory.on_training_batch(iterator)  # batch 3: both workers have handed one over
    assert batches_read(2) == [1, 3]
    memory.stop()
    found = memory.reading()
    assert [sample[1] for sample in found.samples] == [1, 3, 3] and found.prefetch_factor == 2  # stop()'s last


def test_the_finding_grades_by_the_available_ram_and_warns_other_fixes():
    seen = on_cpu(steps(20, wall=0.1, wait=0.05), host(), workers=2, cpu_count=16)
    grown = by_kind(diagnose(seen.__class__(**{**seen.__dict__, "worker_memory": reading(40.0, 50)})))
    assert grown["worker_memory"].severity == "low" and grown["worker_memory"].share == 0.0
    tight = seen.__class__(**{**seen.__dict__, "worker_memory": reading(40.0, 50, available_mib=500.0)})
    report = diagnose(tight)
    found = by_kind(report)
    assert found["worker_memory"].severity == "high" and report.verdict.primary == "input_bound"
    assert "runs out at about batch" in found["worker_memory"].fix
    assert "and the host's RAM runs out at about batch" in verdict_headline(report.to_json())
    # input_bound advises more workers: it says what each costs
    assert "num_workers" in found["input_bound"].snippet and "GiB of RAM" in found["input_bound"].fix
    steady = seen.__class__(**{**seen.__dict__, "worker_memory": reading(2.0, 50)})
    assert "worker_memory" not in by_kind(diagnose(steady))


@pytest.mark.slow
@pytest.mark.timing
def test_copy_on_read_end_to_end_within_a_quarter_of_the_epoch_s_end():
    samples = 400_000
    watcher = Watcher()  # the doctor's default watched steps
    outcome = run_script(str(SCRIPTS / "copy_on_read.py"), [str(samples)], False, watcher, timeout_s=120)
    assert outcome.problem is None
    found = by_kind(diagnose(watcher.observe()))["worker_memory"]
    held = found.evidence["dataset_objects"][0]
    assert (held["attribute"], held["type"], held["length"]) == ("items", "list", samples)
    now = statistics.median(found.evidence["worker_now_bytes"])
    # a worker never copies more than the objects it can read (the projection's own bound), and it is still copying
    assert now < found.evidence["projected_worker_bytes"] <= now + held["bytes"]
    # the same loop, a whole epoch, in this process: its first 60 batches read by the doctor's reader as the watch
    # reads them, then each worker's USS when the last batch arrives, the same workers' and (above) the watched
    # run's reference
    import runpy

    module = runpy.run_path(str(SCRIPTS / "copy_on_read.py"), run_name="copy_on_read")
    loader = torch.utils.data.DataLoader(module["Paths"](samples), batch_size=256, shuffle=True, num_workers=2,
                                         multiprocessing_context="fork")
    iterator, memory = iter(loader), WorkerMemory()
    for index, _ in enumerate(iterator):
        if index < 60:
            memory.on_training_batch(iterator)
        elif index == 60:
            memory.stop()
        if index == len(iterator) - 1:
            reached = statistics.median(private_bytes(worker) for worker in iterator._workers)
    same_workers = project(memory.reading()).projected_worker_bytes
    # measured 4-11% high for the same workers and 6-8% for the watched run, idle and with both cores kept busy;
    # 18-25% for the watched run before the reader counted prefetched batches and read the baseline at its batch
    # (the one-parameter fit of the copying still errs high from a baseline later in the epoch): a quarter leaves
    # twice the error now seen
    assert same_workers == pytest.approx(reached, rel=0.25)
    assert found.evidence["projected_worker_bytes"] == pytest.approx(reached, rel=0.25)


def test_the_page_draws_the_workers_memory_and_the_projection():
    import json

    sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
    from pagecheck import parse_page, visible

    from gpufeed.report.document import render

    seen = on_cpu(steps(20, wall=0.1, wait=0.05), host(), workers=2, cpu_count=16)
    report = diagnose(seen.__class__(**{**seen.__dict__, "worker_memory": reading(40.0, 50, available_mib=500.0)}))
    document = json.loads(json.dumps(report.to_json()))
    fixture = json.loads((Path(__file__).parents[1] / "report" / "fixtures" / "doctor.json").read_text())
    document["about"] = fixture["about"]
    memory = document["timeline"]["worker_memory"]
    assert len(memory["readings"]) == 6 and memory["readings"][-1]["worker_bytes"] == [80 * MIB, 80 * MIB]
    # the curve runs from the last reading (batch 53) to the epoch's end (3,906 batches), rising to the projection
    curve = memory["projection"]
    assert curve[0] == [53, 80 * MIB] and curve[-1][0] == 3906
    assert curve[-1][1] == pytest.approx(by_kind(report)["worker_memory"].evidence["projected_worker_bytes"],
                                         abs=8)  # int rounding
    assert all(later[1] >= earlier[1] for earlier, later in zip(curve, curve[1:], strict=False))
    parsed = parse_page(render(document))
    text = visible(parsed)
    assert "DataLoader workers' memory" in text and "dashed: one worker projected to the end of the epoch" in text
    assert "and the host's RAM runs out at about batch" in text  # the verdict line
