"""Kernel log lines (the "kernel" line format, grammars/kernel_log.lark; the xid and
oom-killer entries of data/messages.toml; data/xid.toml): dmesg, dmesg -T, journalctl
-k and syslog, and the NVRM Xid lines they carry.

Real lines are from tests/data/gpu (dmesg of the H200 recordings); the others are
hand-made in the kernel's and journald's printed shapes.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from forensics import knowledge
from forensics.events import Kind, Severity
from forensics.parsers.text.lines import LineParser, Stamp
from tests.conftest import DATA
from tests.helpers import analyze_text, parse_text

XID_31 = ("NVRM: Xid (PCI:0000:61:00): 31, pid=40417, name=pt_main_thread, channel 0x00000012, intr 00000000. "
          "MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_4 faulted @ 0x7f51_c2e40000. Fault is of type FAULT_PDE "
          "ACCESS_TYPE_VIRT_READ")


def xids(parsed):
    return [e for e in parsed.events if e.kind == Kind.XID]


def one_xid(text: str):
    parsed = parse_text(text + "\n")
    assert parsed.unparsed_lines == 0
    (event,) = xids(parsed)
    return event


# --- envelopes ------------------------------------------------------------------------------

def test_dmesg_uptime_envelope():
    event = one_xid("[   39.028405] NVRM: Xid (PCI:0000:00:06): 13, pid=764, name=misaligned_addr, Graphics "
                    "Exception: channel 0x0000000a, Class 0000cbc0, Offset 00000510, Data 0017e2ac")
    assert event.attrs["uptime"] == 39.028405
    assert event.time is None                      # uptime cannot be placed on the wall clock
    assert event.message.startswith("NVRM: Xid (PCI:0000:00:06): 13")


def test_dmesg_T_wall_clock():
    event = one_xid("[Tue Sep 30 14:12:46 2025] " + XID_31)
    assert event.time == datetime(2025, 9, 30, 14, 12, 46)
    assert event.message == XID_31


def test_journalctl_k_syslog_form():
    parsed = parse_text("[Tue Sep 30 14:12:40 2025] NVRM: Xid (PCI:0000:3b:00): 13, pid=12, name=x, "
                        "Graphics Exception\n"
                        "Sep 30 14:12:46 gpu-node-7 kernel: " + XID_31 + "\n")
    _, event = xids(parsed)
    # no year in the line: the year another line of the input gives
    assert event.time == datetime(2025, 9, 30, 14, 12, 46)
    assert event.attrs["machine"] == "gpu-node-7"
    assert event.message == XID_31


def test_syslog_form_with_the_dmesg_stamp_inside():
    event = one_xid("Dec  2 10:42:37 gpu-node-7 kernel: [   62.489435] NVRM: Xid (PCI:0000:00:06): 13, pid=12, "
                    "name=x, Graphics Exception")
    assert event.attrs["uptime"] == 62.489435 and event.attrs["machine"] == "gpu-node-7"
    assert (event.time.month, event.time.day, event.time.hour, event.time.second) == (12, 2, 10, 37)


def test_journalctl_short_iso_form():
    event = one_xid("2026-12-02T10:42:37.500000+00:00 gpu-node-7 kernel: NVRM: Xid (PCI:0000:00:06): 43, pid=881, "
                    "name=python3, Ch 00000010")
    assert event.time == datetime(2026, 12, 2, 10, 42, 37, 500000)
    assert event.message.startswith("NVRM: Xid")
    assert event.attrs["machine"] == "gpu-node-7"


@pytest.mark.parametrize("line, uptime, host", [
    ("[ 8123.456789] NVRM: x", 8123.456789, None),
    ("[    0.000000] Linux version 6.8.0", 0.0, None),
    ("kernel: [ 12.5] NVRM: loading", 12.5, None),
    ("Nov 04 10:31:19 gpu-node-7 kernel: NVRM: x", None, "gpu-node-7"),
])
def test_kernel_line_headers(line, uptime, host):
    record = LineParser().parse(line)
    assert (record.format, record.uptime, record.host) == ("kernel", uptime, host)


@pytest.mark.parametrize("head, stamp, uptime, host", [
    # the grammar's forms beyond those the format's guard lets through today
    # (data/formats.toml): journalctl -o short-full, dmesg -x, dmesg --time-format=iso
    ("Mon 2025-02-03 08:15:02 UTC gpu-node-2 kernel:", Stamp(2025, 2, 3, 8, 15, 2), None, "gpu-node-2"),
    ("kern  :err   : [ 4417.001122]", None, 4417.001122, None),
    ("kern  :warn  : [Mon Feb  3 08:15:02 2025]", Stamp(2025, 2, 3, 8, 15, 2), None, None),
    ("2025-02-03T08:15:02,250000+00:00", Stamp(2025, 2, 3, 8, 15, 2, 250000), None, None),
    ("Feb 03 08:15:02.250000 gpu-node-2 kernel:", Stamp(None, 2, 3, 8, 15, 2, 250000), None, "gpu-node-2"),
])
def test_kernel_header_grammar_forms(head, stamp, uptime, host):
    from forensics import grammar
    from forensics.parsers.text.lines import record_of
    record = record_of("kernel", grammar.load("kernel_log").parse(head))
    assert (record.stamp, record.uptime, record.host, record.level) == (stamp, uptime, host, None)


# --- Xid fields ------------------------------------------------------------------------

def test_xid_fields():
    event = one_xid("[Tue Sep 30 14:12:46 2025] " + XID_31)
    a = event.attrs
    assert (a["xid"], a["subject_pid"], a["name"], a["pci"]) == (31, 40417, "pt_main_thread", "PCI:0000:61:00")
    assert (a["fault_type"], a["access"], a["address"]) == ("FAULT_PDE", "READ", "0x7f51c2e40000")
    assert a["message_id"] == "xid"
    assert (event.kind, event.severity) == (Kind.XID, Severity.ERROR)
    assert event.pid == 40417                      # the process the driver names


def test_xid_without_a_process():
    event = one_xid("Nov 04 10:31:19 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                    "name=<unknown>, GPU has fallen off the bus.")
    assert event.attrs["xid"] == 79 and event.pid is None and "subject_pid" not in event.attrs
    assert event.attrs["body"] == "GPU has fallen off the bus."


def test_xid_without_pid_field():
    event = one_xid("[   39.019212] NVRM: Xid (PCI:0000:00:06): 13, Graphics SM Warp Exception on (GPC 1, TPC 4, "
                    "SM 0): Misaligned Address")
    assert event.attrs["xid"] == 13 and event.pid is None
    assert event.attrs["body"].endswith("Misaligned Address")


def test_xid_events_from_our_recording():
    # real: the four runs of the misaligned-address program, dmesg on the H200
    path = DATA / "gpu/misaligned_address/dmesg.txt"
    parsed = parse_text(path.read_bytes(), path.name)
    events = xids(parsed)
    assert {e.attrs["xid"] for e in events} == {13, 43}
    with_pid = [e for e in events if e.pid is not None]
    assert with_pid and all(e.attrs.get("uptime") for e in with_pid)
    assert with_pid[0].pid == 764 and "Graphics Exception" in with_pid[0].attrs["body"]
    assert with_pid[0].attrs["name"] == "misaligned_addr"
    assert parsed.kind == "kernel-log" and parsed.unparsed_lines == 0


def test_mmu_fault_from_our_coredump_recording():
    path = DATA / "gpu/tp4_oob_write_coredump/dmesg.txt"
    parsed = parse_text(path.read_bytes(), path.name)
    assert [e.attrs["xid"] for e in xids(parsed)] == [13, 13, 31]
    (fault,) = [e for e in xids(parsed) if e.attrs["xid"] == 31]
    assert (fault.pid, fault.attrs["name"], fault.attrs["uptime"]) == (885, "python3", 46.703195)


def test_mmu_fault_address_from_our_coredump_recording():
    path = DATA / "gpu/tp4_oob_write_coredump/dmesg.txt"
    (fault,) = [e for e in xids(parse_text(path.read_bytes(), path.name)) if e.attrs["xid"] == 31]
    assert fault.attrs["address"] == "0x1827fc002cc050"
    assert fault.attrs["fault_type"] == "UNRECOGNIZED_FAULT"


def test_xid_cascade_across_gpus():
    path = DATA / "realworld/wrap_bundle_dmesg_xid_cascade/dmesg.txt"
    parsed = parse_text(path.read_bytes(), path.name)
    events = xids(parsed)
    pcis = {e.attrs["pci"] for e in events if e.attrs["xid"] == 31}
    assert len(pcis) >= 2                                   # several GPUs faulted
    assert all(e.attrs["access"] == "WRITE" for e in events if e.attrs["xid"] == 31)
    # "NVRM: GPU at PCI:..." lines are the kernel's, neither events nor unparsed
    assert parsed.unparsed_lines == 0


def test_oom_killer_and_nvswitch_lines():
    parsed = parse_text("[   62.5] Out of memory: Killed process 41233 (python3) total-vm:812345678kB, "
                        "anon-rss:123456kB\n"
                        "[   63.0] nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress "
                        "non-posted PRIV error\n")
    oom, sxid = parsed.events
    assert (oom.kind, oom.pid, oom.attrs["name"]) == (Kind.OOM, 41233, "python3")
    assert (sxid.kind, sxid.attrs["sxid"]) == (Kind.XID, 12028)


def test_other_kernel_lines_are_counted_not_unparsed():
    parsed = parse_text("[   62.1] NVRM: GPU at PCI:0000:4c:00: GPU-b41e07c2-5d93-4a8f-9e16-02c7f3a8d5b9\n"
                        "[   62.2] NVRM: GPU Board Serial Number: 1654023019571\n")
    assert parsed.events == [] and parsed.unparsed_lines == 0
    assert parsed.counted_lines == 2 and parsed.formats == {"kernel": 2}


# --- the Xid catalogue --------------------------------------------------------------------

def test_xid_catalogue_is_data_with_what_to_do():
    cat = knowledge.xid_catalogue()
    for code, entry in cat.items():
        assert entry["code"] == code
        assert entry["lean"] in ("application", "hardware", "driver", "collateral"), code
        assert entry["name"] and entry["meaning"] and entry["next"], code
        assert isinstance(entry["app_fault"], bool)
        # only an application fault is device-side evidence against the process named
        assert entry["app_fault"] == (entry["lean"] == "application"), code
    for code in (13, 31, 43, 48, 79, 94, 95):
        assert code in cat
    assert cat[31]["app_fault"] and not cat[79]["app_fault"]
    for code, entry in cat.items():
        assert isinstance(entry.get("hang", False), bool), code
        if "host" in entry:
            assert knowledge.lookup_error(entry["host"]) is not None, code


@pytest.mark.parametrize("code, lean, app_fault, hang", [
    # NVIDIA's Xid table (possible causes) and catalog, as data/xid.toml cites them
    (13, "application", True, False), (31, "application", True, False), (38, "driver", False, False),
    (43, "application", True, False), (45, "collateral", False, False), (48, "hardware", False, False),
    (63, "hardware", False, False), (64, "hardware", False, False), (74, "hardware", False, False),
    (79, "hardware", False, False), (92, "hardware", False, False), (94, "hardware", False, False),
    (95, "hardware", False, False), (109, "application", True, True), (119, "driver", False, True),
    (120, "hardware", False, False),
])
def test_xid_catalogue_entries(code, lean, app_fault, hang):
    entry = knowledge.xid_catalogue()[code]
    assert (entry["lean"], entry["app_fault"], entry.get("hang", False)) == (lean, app_fault, hang)


# --- the Xid message's grammar (grammars/kernel_log.lark `xid`, parsers/text/xid.py) --------
# Hand-made lines in the shapes of public kernel logs: pid without name= as in
# https://github.com/pytorch/pytorch/issues/51382, pid='<unknown>' and an SM exception
# as in https://github.com/leptonai/gpud/pull/46, an SM exception without a process as in
# https://github.com/mbevand/silentarmy/issues/6, a journald prefix as in
# https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1045

def test_xid_pid_without_a_name():
    event = one_xid("[ 4417.001122] NVRM: Xid (PCI:0000:41:00): 43, pid=51207, Ch 00000010")
    assert (event.attrs["xid"], event.pid, event.attrs["subject_pid"]) == (43, 51207, 51207)
    assert event.attrs["body"] == "Ch 00000010" and "name" not in event.attrs


def test_xid_with_nothing_after_the_pid():
    event = one_xid("[Mon Feb  3 08:15:02 2025] NVRM: Xid (PCI:0000:41:00): 31, pid=51290")
    assert event.pid == 51290 and event.time == datetime(2025, 2, 3, 8, 15, 2)


def test_mmu_fault_without_a_name():
    event = one_xid("[Mon Feb  3 08:15:02 2025] NVRM: Xid (PCI:0000:41:00): 31, pid=51291, Ch 00000009, intr "
                    "00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f10_22100000. Fault is of type "
                    "FAULT_PDE ACCESS_TYPE_VIRT_WRITE")
    a = event.attrs
    assert (event.pid, a["access"], a["address"], a["fault_type"]) == (51291, "WRITE", "0x7f1022100000", "FAULT_PDE")
    assert a["body"].startswith("Ch 00000009, intr 00000000. MMU Fault: ENGINE GRAPHICS")


def test_xid_process_name_with_blanks_under_a_journald_prefix():
    event = one_xid("Feb 03 08:15:02 gpu-node-2 kernel: NVRM: Xid (PCI:0000:41:00): 45, pid=880, name=my trainer, "
                    "Ch 00000002 caused by previous Xid 74")
    assert (event.pid, event.attrs["name"], event.attrs["machine"]) == (880, "my trainer", "gpu-node-2")
    assert event.attrs["body"] == "Ch 00000002 caused by previous Xid 74"


def test_xid_with_an_unknown_process_names_none():
    event = one_xid("[Mon Feb  3 08:15:02 2025] NVRM: Xid (PCI:0000:41:00): 13, pid='<unknown>', name=<unknown>, "
                    "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 1): Out Of Range Address")
    assert event.pid is None and "subject_pid" not in event.attrs
    assert event.attrs["fault"] == "Warp Out-of-range Address"


@pytest.mark.parametrize("detail, fault, code", [
    ("Graphics SM Warp Exception on (GPC 3, TPC 0): Misaligned Address", "Warp Misaligned Address", 716),
    ("Graphics SM Warp Exception on (GPC 3, TPC 0, SM 1): Out Of Range Address", "Warp Out-of-range Address", 700),
    ("Graphics SM Warp Exception on (GPC 3, TPC 0, SM 1): Illegal Address", "Warp Illegal Address", 700),
    ("Graphics SM Warp Exception on (GPC 3, TPC 0, SM 1): MMU Fault", "Warp MMU Fault", 700),
    # an exception the catalogue names, whose host error it does not establish
    ("Graphics SM Warp Exception on (GPC 3, TPC 0, SM 0): Illegal Instruction Parameter",
     "Warp Illegal Instruction Parameter", None),
    # the summary and register lines of the same fault name no exception
    ("Graphics SM Global Exception on (GPC 3, TPC 0): Physical Multiple Warp Errors", None, None),
    ("Graphics Exception: ESR 0x51e730=0x1000e 0x51e734=0x20 0x51e728=0xc81eb60 0x51e72c=0x1174", None, None),
])
def test_an_xid_13_detail_names_the_device_exception_and_the_error(detail, fault, code):
    event = one_xid(f"[  903.114422] NVRM: Xid (PCI:0000:41:00): 13, {detail}")
    assert event.attrs.get("fault") == fault and event.attrs["body"] == detail
    err = knowledge.xid_host_error(event.attrs)
    assert (err.code if err else None) == code


def test_the_error_an_xid_implies_without_a_detail():
    assert knowledge.xid_host_error({"xid": 31}).name == "CUDA_ERROR_ILLEGAL_ADDRESS"     # an MMU fault
    assert knowledge.xid_host_error({"xid": 43}) is None
    assert knowledge.xid_host_error({"xid": 79}) is None


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:41:00 GPU-I:01 GPU-CI:00): 31, pid=700, name=python3, channel 0x00000012",   # MIG
    "NVRM: Xid (0000:41:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100",                 # old driver
    "NVRM: Xid (PCI:0000:41:00): 79, GPU has fallen off the bus.",
])
def test_other_xid_forms_parse(line):
    from forensics.parsers.text import xid
    found = xid.read(line)
    assert found["xid"] in (13, 31, 79) and found["pci"].startswith(("PCI:", "0000"))


def test_every_pid_an_xid_names_is_a_process():
    # runs days apart, each faulting on its own: each pid is a process of the table
    case = analyze_text("[Mon Feb  3 08:15:02 2025] NVRM: Xid (PCI:0000:41:00): 43, pid=61001, Ch 00000008\n"
                        "[Mon Feb  3 09:20:11 2025] NVRM: Xid (PCI:0000:41:00): 43, pid=61877, Ch 00000008\n"
                        "[Tue Feb  4 10:01:40 2025] NVRM: Xid (PCI:0000:5e:00): 31, pid=3120, Ch 00000008, intr "
                        "00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_2 faulted @ 0x7f00_10000000. Fault is of "
                        "type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")
    assert {61001, 61877, 3120} <= {p.pid for p in case.processes.processes()}


def test_xid_grammar_terminals_are_linear():
    # the xid and sm_exception start rules' terminals (tests/test_linear_time.py loads
    # the grammar with its `start` rule only); matched where a token starts, as lark does
    import re

    from forensics import grammar
    from tests.pumps import linear, pumps
    parser = grammar.load("kernel_log", ("start", "xid", "sm_exception"))
    checked = 0
    for terminal in parser.terminals:
        if not terminal.name.startswith(("XID_", "SM_")):
            continue
        pattern = re.compile(terminal.pattern.to_regexp())
        failures = [f"{pump}: {why}" for pump in pumps(pattern.pattern, pattern.flags)
                    if (why := linear(pattern.match, pump))]
        assert not failures, (terminal.name, failures[:2])
        checked += 1
    assert checked >= 9


# --- the header alone ----------------------------------------------------------------------
# (kernel lines are read by the line parser through the "kernel" line format; the old
# kernel_log.parse() was dead code that raised on every line and was removed)

def test_a_line_without_a_kernel_mark_is_no_kernel_line():
    assert LineParser().parse("INFO 01-02 03:04:05 [x.py:1] ready").format != "kernel"


def test_dmesg_human_stamp_is_read_with_its_year():
    record = LineParser().parse("[Wed Dec  2 10:42:37 2026] NVRM: Xid (PCI:0000:00:06): 31, pid=1, name=p, x")
    assert record.format == "kernel" and record.stamp == Stamp(2026, 12, 2, 10, 42, 37)
    assert record.message.startswith("NVRM: Xid")
