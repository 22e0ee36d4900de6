"""The benchmark's generators of issue 24 (bench/realistic.py EXTRA_MODES) and its
field-by-field comparison: each bundle has the shape it claims, its crash is where
crash_offset says, and positions compare across a bundle and its crash alone."""

from __future__ import annotations

import re

import pytest

from bench import realistic
from forensics.case import analyze
from forensics.report.document import build


def test_the_sanitizer_bundle_is_a_long_memcheck_session_then_the_recording(tmp_path):
    target = realistic.generate(tmp_path / "s", 2 << 20, "sanitizer")
    data = target.read_bytes()
    crash = realistic.SANITIZER_SOURCE.read_bytes()
    assert target.name == realistic.SANITIZER_NAME and data.endswith(crash)
    bulk = data[:-len(crash)].decode().splitlines()
    assert bulk[0] == "========= COMPUTE-SANITIZER" and bulk[-1].startswith("========= ERROR SUMMARY: ")
    assert all(line.startswith("=========") for line in bulk)
    heads = [line for line in bulk if line.startswith("========= Invalid __global__ ")]
    assert int(bulk[-1].split(": ")[1].split()[0].replace(",", "")) == len(heads)
    kernels = {re.sub(r"\+0x\w+ in .*", "", line) for line in bulk if line.startswith("=========     at ")}
    places = {line for line in bulk if line.startswith("=========     at ")}
    assert len(kernels) > 100 and len(places) > len(kernels)
    assert len({line for line in bulk if line.startswith("=========     by thread")}) > len(heads) // 2
    assert realistic.crash_offset(target) == len(bulk)


def test_the_smallfiles_bundle_is_about_two_thousand_per_writer_files(tmp_path):
    target = realistic.generate(tmp_path / "f", 4 << 20, "smallfiles")
    files = [p for p in target.rglob("*") if p.is_file()]
    assert abs(len(files) - realistic.SMALL_FILES) < realistic.SMALL_FILES // 10
    assert {p.parent.name for p in files} == {"rank0", "rank1", "server", target.name}
    for rank in ("rank0", "rank1"):
        some = next((target / rank).iterdir()).read_text(encoding="utf-8").splitlines()
        tp = rank[-1]
        assert all(f"_TP{tp} pid=" in line[:40] for line in some if line.startswith("(Worker_TP"))
    assert (target / "zz_crash.log").read_text(encoding="utf-8").startswith(
        realistic.split_recording(realistic.SOURCE.read_text(encoding="utf-8").splitlines())[1][0])


def test_the_tqdm_bundle_starts_with_bars_and_no_newline(tmp_path):
    target = realistic.generate(tmp_path / "t", 4 << 20, "tqdm")
    data = target.read_bytes()
    first = data[:data.index(b"\n")]
    assert len(first) > (4 << 20) * realistic.TQDM_SHARE * 0.9
    assert first.startswith(b"\rProcessed prompts: ") and first.count(b"\r") > 1000
    lines = realistic.SOURCE.read_bytes().count(b"\n")
    assert realistic.crash_offset(target) == data.count(b"\n") - lines


@pytest.mark.parametrize("mode", ("smallfiles", "tqdm"))
def test_the_new_modes_give_the_verdict_of_the_crash_alone(tmp_path, mode):
    want = realistic.verdict_fields(build(analyze(str(realistic.crash_source(mode)))).to_json())
    target = realistic.generate(tmp_path / mode, 4 << 20, mode)
    got = realistic.verdict_fields(build(analyze(str(target))).to_json(), realistic.crash_offset(target))
    assert realistic.differing_fields(got, want) == {}


def test_positions_and_stream_keys_compare_across_bundle_and_recording():
    def fields(source: str, line: int) -> dict:
        return realistic.verdict_fields({"verdict": {"surfaces": [{"source": f"{source}:{line}"}],
                                                     "first_failure": {"key": f"stream:/somewhere/{source.split('/')[-1]}"}},
                                         "stories": []}, offset=line - 84)
    alone = fields("tests/data/gpu/torch_item_after_oob/compute-sanitizer_memcheck.txt", 84)
    assert alone == fields("/tmp/b/compute-sanitizer.log", 5084) == fields("/tmp/b/console.log", 90)
    assert alone["surfaces"] == [{"source": "crash.log:84"}] and alone["first_failure"]["key"] == "stream:crash.log"
    other = fields("/tmp/b/worker_TP1.log", 84)
    assert realistic.differing_fields(other, alone) == {
        "first_failure": ({"key": "stream:worker_TP1.log"}, {"key": "stream:crash.log"}),
        "surfaces": ([{"source": "worker_TP1.log:84"}], [{"source": "crash.log:84"}])}
