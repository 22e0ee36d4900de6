"""grammars/kernel_log.lark and the Xid catalogue, on real dmesg lines."""

from datetime import datetime

import pytest

from forensics.events import Kind
from forensics.parsers import kernel_log
from forensics.parsers.text import TextLogParser
from forensics.rules.origin import xid_catalogue
from forensics.sources import sniff
from tests.conftest import DATA, RECORDINGS


def test_dmesg_uptime_envelope_real():
    line = (RECORDINGS / "gpu/s1a_tp4_prefill_crash/dmesg.txt")
    if not line.exists():
        pytest.skip("shared recordings not available")
    text = line.read_text().splitlines()[1]
    parsed = kernel_log.parse(text)
    assert parsed.uptime == 62.489435 and parsed.message.startswith("NVRM: Xid (PCI:0000:00:06): 31, pid=895")


@pytest.mark.parametrize("line, wall, stamp, host", [
    # hand-made from dmesg -T, journalctl -k, syslog and short-iso formats
    ("[Wed Dec  2 10:42:37 2026] NVRM: Xid (PCI:0000:00:06): 31, pid=1, name=p, x", datetime(2026, 12, 2, 10, 42, 37), None, None),
    ("Dec 02 10:42:37 gpu-node-7 kernel: NVRM: Xid (PCI:0000:00:06): 13, x", None, "12-02 10:42:37", "gpu-node-7"),
    ("2026-12-02T10:42:37.5+00:00 gpu-node-7 kernel: NVRM: Xid (PCI:0000:00:06): 13, x",
     datetime(2026, 12, 2, 10, 42, 37, 500000), None, "gpu-node-7"),
])
def test_wall_clock_envelopes(line, wall, stamp, host):
    parsed = kernel_log.parse(line)
    assert (parsed.wall_time, parsed.stamp, parsed.host) == (wall, stamp, host)
    assert parsed.message.startswith("NVRM: Xid")


def test_xid_events_from_our_recording_with_and_without_pid():
    path = DATA / "gpu/misaligned_address/dmesg.txt"
    parsed = TextLogParser().parse(sniff(path, path.name))
    xids = [e for e in parsed.events if e.kind == Kind.XID]
    with_pid = [e for e in xids if e.pid is not None]
    assert {e.attrs["xid"] for e in xids} == {"13", "43"}
    assert with_pid and all(e.attrs.get("uptime") for e in with_pid)
    assert with_pid[0].pid == 764 and "Graphics Exception" in with_pid[0].attrs["body"]


def test_xid_catalogue_is_data_with_what_to_do():
    cat = xid_catalogue()
    for code in (13, 31, 43, 48, 79, 94, 95):
        entry = cat[code]
        assert entry["lean"] in ("application", "hardware", "driver", "collateral")
        assert entry["meaning"] and entry["next"]
    assert cat[31]["app_fault"] and not cat[79]["app_fault"]
