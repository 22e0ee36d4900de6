"""The engines give the same report: local (one process), local processes, Dask."""

import pytest

from forensics import engines
from forensics.case import analyze
from tests.conftest import DATA

REPO = DATA.parents[1]
SAMPLES = sorted(p for p in (REPO / "samples").iterdir() if p.is_dir())
BUNDLES = SAMPLES + [DATA / "gpu/tp4_oob_write_memcheck", DATA / "gpu/misaligned_address",
                     DATA / "handmade/mnnvl_incident", DATA / "cpu/faulthandler_segv"]


def test_process_pool_gives_the_same_report(monkeypatch):
    baseline = analyze(str(DATA / "gpu/tp4_oob_write_memcheck")).to_json()
    monkeypatch.setattr(engines, "PARALLEL_MIN_BYTES", 0)          # force the pool on small inputs
    assert analyze(str(DATA / "gpu/tp4_oob_write_memcheck")).to_json() == baseline


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_dask_local_cluster_is_byte_identical(bundle):
    pytest.importorskip("distributed")
    from distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = analyze(str(bundle), engine="dask", scheduler=cluster.scheduler_address).to_json()
    assert remote == analyze(str(bundle)).to_json()


def test_cli_dask_engine_and_cold_start(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path
    sample = Path(__file__).resolve().parents[1] / "samples/gpu_tp4_oob_del_cumemfree"
    subprocess.run([sys.executable, "-m", "forensics", "analyze", str(sample)], capture_output=True, check=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "forensics", "analyze", str(sample)], capture_output=True, check=True)
    assert time.perf_counter() - started < 1.5          # measured 0.5 s on the 2-core machine
    local = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(sample), "--format", "json"],
                           capture_output=True, check=True).stdout
    dask = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(sample), "--format", "json",
                           "--engine", "dask"], capture_output=True, check=True).stdout
    assert local == dask


def test_dask_engine_with_an_archive(tmp_path):
    pytest.importorskip("distributed")
    import tarfile
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(DATA / "gpu/tp4_oob_write_del_cumemfree", arcname="run1")
    local = analyze(str(tmp_path)).to_json()
    assert json_verdict(local)["error"]["code"] == 700          # members parsed as streams
    assert analyze(str(tmp_path), engine="dask").to_json() == local


def json_verdict(text):
    import json
    return json.loads(text)["verdict"]
