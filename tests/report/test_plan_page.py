"""The plan page, built from a real `gpufeed plan --model resnet18 ... --check` document of the planner before
the roofline (plan.json: MFU times, one host sized for the run), from one of the roofline planner (plan_roofline.json:
`gpufeed plan --model resnet50 --input 3x224x224 --classes 1000 --batch-size 256 --dataset-size 1281167 --epochs 90
--optimizer sgd --gpu 4090`), from variants made here (no check block; a step too big for some cards), and end to
end through `gpufeed plan --html`."""

from __future__ import annotations

import copy
import html
import json
from pathlib import Path

import pytest
from pagecheck import external_urls, page_structure  # the same checks as the bench page's

from gpufeed.cli.main import main
from gpufeed.report.document import render
from gpufeed.report.plan_page import plan_page, scientific
from gpufeed.units import size_text

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str = "plan") -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def page_words(document: dict) -> tuple[str, str]:
    text = plan_page(document).render()
    structure = page_structure(text)
    assert structure.errors == []
    assert external_urls(text) == []
    return text, "\n".join(structure.texts)


def test_numbers_are_written_for_reading():
    assert scientific(2725993512960) == "2.73 × 10¹²"
    assert scientific(0.00125) == "1.25 × 10⁻³"
    assert size_text(3759548928) == "3.5 GiB"  # 3,759,548,928 / 2^30 = 3.501
    assert size_text(46796608) == "45 MiB"  # 46,796,608 / 2^20 = 44.6


def test_fixture_page_of_a_document_from_before_the_roofline():
    document = load()
    text, words = page_words(document)
    assert page_structure(text).charts == 3  # memory by part, memory against each GPU, time and cost
    assert document["recommendation"] in words
    assert words.index(document["recommendation"]) < words.index("Request")  # the recommendation comes first
    assert "Peak: 3.5 GiB per GPU at batch 256" in words  # 3,759,548,928 bytes / 2^30
    assert "need 3.5 GiB" in words  # the line on the chart of every GPU's memory
    assert "24 of 24 fit" in words
    assert "max batch 16,056" in words  # NVIDIA B200 (HGX)
    assert "2.73 × 10¹²" in words  # FLOPs per step
    assert "35% (20%-50%)" in words  # MFU and its band
    assert "768.0 GiB (at least 384.0 GiB)" in words  # RAM: 824,633,720,832 and 412,316,860,416 bytes
    assert "1,600 W" in words and document["host"]["psu_arithmetic"] in words
    assert "180.1 GiB" in words  # disk: 193,412,602,752 bytes, in GiB as every size on the page
    for line in document["check"]["lines"]:
        assert line in words
    assert document["unmeasured"][0] in words
    assert "time unknown: NVIDIA T4: no dense bf16 figure" in words


def test_roofline_document_page():
    document = load("plan_roofline")
    text, words = page_words(document)
    assert page_structure(text).charts == 3
    assert "The machine to buy around NVIDIA GeForce RTX 4090: a workstation with 1 card." in words
    assert "48.0 GiB (at least 24.0 GiB)" in words  # the RAM rule: one 4090's 24 GiB, twice ideally
    assert "RAM to keep the dataset cached (a choice)\n256.0 GiB" in words  # apart from the requirement
    assert "360.0 GiB" in words  # disk: source files + packed ImageNet + checkpoints, 386,520,837,376 bytes
    assert "90%, 55% (x0.80-x1.25)" in words and "DeepLearningExamples" in words  # efficiencies, not an MFU
    assert "hours from the roofline of the step" in words
    table = words[words.index("Every catalog GPU as ranked"):]
    assert "\nNVIDIA T4\n16 GiB\nyes\n366\nfp16\n" in table  # no bf16 on Turing: fp16 with a scaler
    assert "\n280,000 (8)\n" in table  # B200 bought as an 8-GPU board
    rtx4090 = next(gpu for gpu in document["gpus"] if gpu["name"] == "NVIDIA GeForce RTX 4090")
    assert f"\n{rtx4090['rent_usd_per_hour']:.2f}\n{rtx4090['cost_rent_usd']:,.2f}\n1,599 (1)\n" in table


def test_gpus_appear_in_the_documents_ranking():
    document = load()
    _, words = page_words(document)
    table = words[words.index("Every catalog GPU as ranked"):]
    positions = [table.index(f"\n{gpu['name']}\n") for gpu in document["gpus"]]
    assert positions == sorted(positions)
    assert "\n1,599\n" in table and "\n2022-10\n" in table  # the RTX 4090's price and its date
    assert "\n2.06\n" in table  # RTX 6000 Ada: rent for the run, USD


def test_page_without_check():
    document = load()
    del document["check"]
    text, words = page_words(document)
    assert page_structure(text).charts == 3
    assert "Check against" not in words
    assert "step time on cpu" not in words


def test_cards_too_small_are_marked():
    document = load()
    document["memory"]["peak_bytes"] = 30 * 2**30
    for gpu in document["gpus"]:
        gpu["fits"] = gpu["memory_bytes"] >= document["memory"]["peak_bytes"]
    _, words = page_words(document)
    # under 30 GiB: RTX 4090, A10, L4, RTX 3090 (24), RTX 4080, T4, V100 SXM2 16GB, V100 PCIe 16GB (16), 3060 (12)
    assert "15 of 24 fit" in words
    assert words.count("does not fit (max batch") == 9
    assert "need 30.0 GiB" in words


def test_check_with_measured_memory_shows_the_error():
    document = load()
    document["check"].update(device="cuda", predicted_peak_bytes=3 * 2**30, measured_peak_bytes=2**31 + 2**30 // 2,
                             error_fraction=(3 * 2**30 - 2.5 * 2**30) / (2.5 * 2**30))
    _, words = page_words(document)
    assert "Check against a measured step on cuda" in words
    assert "3.0 GiB" in words and "2.5 GiB" in words and "+20.0%" in words  # (3 - 2.5) / 2.5


def test_report_of_a_copy_writes_the_same_page(tmp_path):
    source = tmp_path / "plan.json"
    source.write_text((FIXTURES / "plan.json").read_text(encoding="utf-8"), encoding="utf-8")
    target = tmp_path / "plan.html"
    assert main(["report", str(source), "--html", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == render(load())
    assert html.escape(load()["recommendation"]) in target.read_text(encoding="utf-8")


@pytest.mark.slow
def test_plan_html_equals_report_of_its_json(tmp_path):
    saved, page = tmp_path / "plan.json", tmp_path / "plan.html"
    assert main(["plan", "--model", "mlp", "--epochs", "1", "--json", str(saved), "--html", str(page)]) == 0
    rebuilt = tmp_path / "rebuilt.html"
    assert main(["report", str(saved), "--html", str(rebuilt)]) == 0
    assert page.read_bytes() == rebuilt.read_bytes()
    assert page_structure(page.read_text(encoding="utf-8")).charts == 3


def test_rendering_leaves_the_document_as_it_was():
    document = load()
    before = copy.deepcopy(document)
    plan_page(document).render()
    assert document == before
