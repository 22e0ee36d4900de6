"""The NVRM Xid message read field by field (grammars/kernel_log.lark, start rules `xid`
and `sm_exception`), over what the message catalogue's `xid` entry found.

The catalogue's pattern (data/messages.toml) finds the line and the MMU fault's address,
type and access; the grammar reads the rest the way the driver prints it, whatever the
driver's age: the process as ``pid=N, name=comm``, as ``pid=N`` alone (older drivers),
as ``pid='<unknown>'``, or not at all; a name with blanks; the detail after it.  An Xid
13's detail names the SM exception ("Graphics SM Warp Exception on (GPC 0, TPC 1):
Misaligned Address"); data/cuda_exceptions.toml (`xid_sm_exception`) says which device exception
that is, and so which CUDA error the process sees (knowledge.xid_host_error).
"""

from __future__ import annotations

import re

from lark import Token, Tree
from lark.exceptions import LarkError

from forensics import grammar, knowledge

_OPEN = "NVRM: Xid ("
_STARTS = ("start", "xid", "sm_exception")


def _parse(text: str, start: str) -> Tree | None:
    try:
        return grammar.load("kernel_log", _STARTS).parse(text, start=start)
    except LarkError:
        return None


def _tokens(tree: Tree) -> dict[str, str]:
    return {t.type: str(t) for t in tree.scan_values(lambda v: isinstance(v, Token))}


def read(message: str) -> dict:
    """The fields of the Xid message in ``message`` (xid, pci, subject_pid, name, body,
    fault), or {} when it is not one the grammar reads."""
    at = message.find(_OPEN)
    if at < 0:
        return {}
    tree = _parse(message[at:].rstrip("\r\n"), "xid")
    if tree is None:
        return {}
    tokens = _tokens(tree)
    out: dict = {"xid": knowledge.claimed_int(tokens["XID_CODE"]), "pci": tokens["XID_DEVICE"]}
    pid = tokens.get("XID_PID")
    if pid is not None and pid.isdigit():
        out["subject_pid"] = knowledge.claimed_int(pid)
    if "XID_NAME" in tokens:
        out["name"] = tokens["XID_NAME"].strip()
    detail = next(tree.scan_values(lambda v: isinstance(v, Token) and v.type == "XID_DETAIL"), None)
    if detail is not None:
        out["body"] = str(detail)
        out["body_at"] = at + detail.start_pos          # where the detail starts in the message
        exception = sm_exception(str(detail))
        if exception is not None:
            out["fault"] = exception
    return out


def sm_exception(detail: str) -> str | None:
    """The device exception an SM exception detail names ("... Warp Exception on (GPC 0,
    TPC 1): Misaligned Address" -> "Warp Misaligned Address"), when the catalogue
    establishes one."""
    if not detail.startswith("Graphics SM "):
        return None
    tree = _parse(detail, "sm_exception")
    return knowledge.xid_exception(_tokens(tree).get("SM_ERROR")) if tree is not None else None


def refine(match: re.Match, fields: dict) -> dict:
    """The catalogue entry's fields of an Xid line (``match``: its pattern's match),
    with what the grammar reads: the pid and name of a process the pattern did not take
    apart (``pid=N, Ch ...``: its body then starts after them), and the device exception
    an SM exception names."""
    found = read(match.string)
    if not found or found.get("xid") != fields.get("xid"):
        return fields
    out = dict(fields)
    for key in ("subject_pid", "name", "fault"):
        if key in found:
            out[key] = found[key]
    if "body" in match.re.groupindex and match.start("body") >= 0:
        start, end = match.span("body")
        detail_at = found.get("body_at")
        if detail_at is not None and start < detail_at <= end:
            out["body"] = match.string[detail_at:end]        # the body without the process
        elif detail_at is None and str(out.get("body", "")).startswith("pid="):
            out.pop("body", None)                            # a process and no detail
    return out
