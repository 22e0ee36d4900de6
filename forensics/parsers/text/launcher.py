"""Launchers' records of their children: what torchrun, DeepSpeed, torch.distributed.launch
and mpirun print about the processes they started.

- torchrun's ChildFailedError summary (grammars/torchrun_summary.lark): every failed rank
  with its exit code, pid, host and error, and the launcher's "Root Cause (first observed
  failure)" - which is only the earliest timestamp, not evidence of a cause.  Pastes cut
  it: a summary without its header, starting at "Root Cause", at an entry ("[2]:") or
  inside one ("  exitcode  : -6 (pid: 12345)") is read as far as it goes; each entry is
  a child (by rank, or by pid alone when its rank line was cut).  One LAUNCHER_SUMMARY
  event, ``failures`` and ``root_cause`` the entries (story.subjects reads them).
- One-line records (grammars/launcher_records.lark): a child force-killed, a child that
  exited, mpirun's report of the rank that died or exited non-zero (a box of dashes,
  taken whole).  Each is an event about the child it names - ``subject_pid``,
  ``subject_rank``, ``exit_code`` (-N for a signal, as Python's returncode), ``signal`` -
  in the kinds story.subjects reads (CHILD_FAILED, SHUTDOWN, EXIT).

What a launcher does *not* say is not read into it: DeepSpeed's "[...] exits with return
code = N" and torch.distributed.launch's CalledProcessError print the command line of
the *last* child spawned (the loop variable ``cmd``), whichever child failed, so the
``--local_rank`` in them names no failed child.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

from lark import Token, Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge
from forensics.events import Kind, Severity
from forensics.knowledge import claimed_int
from forensics.parsers import terminals
from forensics.parsers.text.block import BlockResult, unparsable

# --- the torchrun summary ----------------------------------------------------------------



# the summary's line shapes: terminals of grammars/torchrun_summary.lark
_T = terminals.of("torchrun_summary")
_RECORDS = terminals.of("launcher_records")


def _when(text: str):
    try:        # torchrun writes 2025-08-19_11:02:46
        return datetime.strptime(text[:19], "%Y-%m-%d_%H:%M:%S") if text else None
    except ValueError:
        return None


@v_args(inline=True)
class _ToSummary(Transformer):
    def start(self, *items):
        program, root, failures = None, None, []
        after_root = False
        for item in items:
            tag = item[0]
            if tag == "rule":
                program = program or item[1]
            elif tag == "root":
                after_root = True
            elif tag == "failures":
                after_root = False
            elif tag == "entry":
                if after_root and root is None:
                    root = item[1]
                else:
                    failures.append(item[1])
                after_root = False
        return {"program": program, "failures": failures, "root_cause": root}

    def loose(self, *fields):
        return ("entry", _entry(None, fields))

    def failure(self, index, *fields):
        return ("entry", _entry(claimed_int(index), fields))

    def rule(self, _ruler, title=None):
        return ("rule", str(title).strip().removesuffix("FAILED").strip() if title else None)

    def section(self):
        return ("section",)

    def failures_mark(self):
        return ("failures",)

    def no_other(self):
        return ("no_other",)

    def root_mark(self):
        return ("root",)

    def time(self, value=None):
        text = str(value or "").strip()
        return {"time": text or None, "failed_at": _when(text)}

    def host(self, value=None):
        return {"host": str(value or "").strip() or None}

    def rank(self, rank, local_rank):
        return {"rank": claimed_int(rank), "local_rank": claimed_int(local_rank)}

    def exitcode(self, code, pid, _signal=None):
        return {"exit_code": claimed_int(code), "pid": claimed_int(pid)}

    def error_file(self, value=None):
        text = str(value or "").strip()
        return {"error_file": None if text in ("<N/A>", "") else text}

    def signal_traceback(self, signal, name, pid, *cont):
        # the child was killed: torchrun's message names the signal and the pid
        text = "\n".join([f"Signal {signal} ({name}) received by PID {pid}", *cont]).strip()
        return {"traceback": text, "signal": claimed_int(signal), "signal_name": str(name)}

    def traceback(self, *items):
        lines = [str(i).strip() if isinstance(i, Token) and i.type == "VALUE" else i for i in items]
        text = "\n".join(lines).strip()
        if len(text) > 1 and text[0] == text[-1] == '"':        # torch 1.9: msg: "..."
            text = text[1:-1]
        return {"traceback": text}

    def cont(self, text):
        return str(text)


def _entry(index, fields) -> dict:
    out = {"index": index}
    for field in fields:
        out.update(field)
    code = out.get("exit_code")
    if "signal" in out:
        pass                            # the traceback names the signal
    elif isinstance(code, int) and code < 0:
        out["signal"], out["signal_name"] = -code, knowledge.signal_name(-code)
    return out


class SummaryBlock:
    """torchrun's summary, from its border (``headed``) or from wherever a paste cut it
    in.  It takes the lines that keep the summary's shape and ends at its closing border
    or at the first line that does not (a cut summary has no border to end at)."""

    format = "torchrun-summary"

    def __init__(self, headed: bool) -> None:
        self.headed = headed
        self.lines: list[str] = []
        self.linenos: list[int] = []
        self.border = None
        self.last = None           # the shape of the last line taken
        self.closed = False

    def _take(self, text: str, lineno: int, shape: str) -> bool:
        self.lines.append(text)
        self.linenos.append(lineno)
        if shape != "blank":
            self.last = shape
        return True

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.closed:
            return False
        if not text.strip():
            return self._take(text, lineno, "blank")
        if not self.lines:
            if self.headed:
                self.border = text.strip()[0]
            return self._take(text, lineno, "border" if self.headed else _shape(text))
        if self.headed and self.last == "border" and len([t for t in self.lines if t.strip()]) == 1:
            # the opening border: "<program> FAILED" follows, or this is no summary
            return self._take(text, lineno, "title") if _T.TITLE_LINE.match(text) else False
        shape = _shape(text)
        if shape == "border":
            char = text.strip()[0]
            # the closing border: the opening's character; "*" is torch 1.9's border
            # (its sections are "="), so a summary cut above its header ends at a "*"
            self.closed = char == self.border if self.headed else char == "*"
            return self._take(text, lineno, shape)
        if shape in ("dashes", "marker", "index"):
            return self._take(text, lineno, shape)
        if shape in ("field", "traceback"):
            return self._take(text, lineno, shape) if self.last in ("index", "field", "traceback", "cont") \
                else False
        # a line of an entry's traceback: torchrun indents every one of them (a summary
        # whose closing border was cut ends at the first line that is not)
        if self.last in ("traceback", "cont") and text[:1] in " \t":
            return self._take(text, lineno, "cont")
        return False

    def close(self, make):
        pairs = [(n, t) for n, t in zip(self.linenos, self.lines) if t.strip()]
        blank = [n for n, t in zip(self.linenos, self.lines) if not t.strip()]
        if len(pairs) < (3 if self.headed else 1):
            return _give_back(pairs, blank)
        text = "".join(t.rstrip() + "\n" for _, t in pairs)
        try:
            summary = grammar.transforming("torchrun_summary", _ToSummary()).parse(text)
        except (LarkError, ValueError, TypeError):
            return unparsable(self.linenos, self.lines, "a torchrun failure summary")
        root = summary["root_cause"]
        failed = ([root] if root else []) + summary["failures"]
        if not any(isinstance(f.get("pid"), int) or isinstance(f.get("rank"), int) for f in failed):
            return _give_back(pairs, blank)     # markers, no child: nothing said
        header = bool(summary["program"])
        attrs = {"program": summary["program"], "failures": summary["failures"], "root_cause": root,
                 "header_cut": None if header else True}
        who = ", ".join(_child(f) for f in failed)
        opinion = (f"; the launcher names {_child(root)} as root cause (first observed failure, by timestamp)"
                   if root else "")
        if header:
            message = f"torchrun: {summary['program']} failed on {who}{opinion}"
        else:
            message = f"torchrun's failure summary (cut: its header is not in the input): {who} failed{opinion}"
        event = make(Kind.LAUNCHER_SUMMARY, message, Severity.ERROR, attrs)
        return BlockResult([event], [n for n, _ in pairs] + blank)


def _give_back(pairs: list[tuple[int, str]], blank: list[int]) -> BlockResult:
    """Lines taken that make no summary (a ruler, a lone marker): as they would have been
    read on their own, noise (a ruler) or unparsed."""
    noise = [(n, t) for n, t in pairs if any(p.search(t) for _, p in knowledge.noise_patterns())]
    return BlockResult([], blank, [p for p in pairs if p not in noise], [], noise=len(noise))


# a line's shape, by the first of these terminals it matches
_SHAPES = (("border", "BORDER_LINE"), ("dashes", "DASHES_LINE"), ("marker", "MARKER_LINE"), ("index", "INDEX_LINE"),
           ("traceback", "TRACEBACK_FIELD"), ("field", "FIELD_LINE"))


def _shape(text: str) -> str:
    for shape, name in _SHAPES:
        if getattr(_T, name).match(text):
            return shape
    return "other"


def _child(failure: dict) -> str:
    if isinstance(failure.get("rank"), int):
        return f"rank {failure['rank']}"
    return f"pid {failure['pid']}" if isinstance(failure.get("pid"), int) else "a child"


# --- one-line records ------------------------------------------------------------------------

# trigger (a literal of the line) -> the grammar's start rule that reads it
_TRIGGERS = {
    "Closing process ": "elastic_closing",
    "Unable to shutdown process ": "elastic_forced_kill",
    "Child process ": "elastic_no_error_file",
    " exits successfully": "deepspeed_exit_ok",
    "Main process received ": "launcher_signalled",
    " noticed that process rank ": "mpi_noticed",
    " has exited due to process rank ": "mpi_exited_due",
    " terminated normally, but ": "mpi_job_aborted",
    " detected that one or more processes exited with non-zero status": "mpi_non_zero",
}
# mpirun's messages are boxes of dashes: the lines up to the closing ruler are the record's,
# at most as many as the message has (help-prun.txt) - a box pasted without its ruler
# takes nothing of what follows it
_BOXED = {"mpi_noticed": 0, "mpi_job_aborted": 1, "mpi_non_zero": 5, "mpi_exited_due": 23}
# the box's lines that say more: (literal, the rule that reads the line)
_IN_BOX = (("Process name:", "mpi_process_name"), ("Exit code:", "mpi_exit_code"), ("node ", "mpi_exited_node"))


@functools.lru_cache(maxsize=None)
def _records():
    return grammar.load("launcher_records", tuple(dict.fromkeys(_TRIGGERS.values())) + tuple(r for _, r in _IN_BOX))


def _parse(text: str, rule: str) -> dict | None:
    try:
        tree = _records().parse(text.strip(), start=rule)
    except LarkError:
        return None
    return _ToRecord().transform(tree)


class _Signal(NamedTuple):
    number: int | None
    printed: str                    # as the line prints it ("Signals.SIGTERM", "15")
    name: str                       # without Python's "Signals." ("SIGTERM", "15")


def _box_ruler(text: str) -> bool:
    return _RECORDS.BOX_RULER.match(text) is not None


def _pid(token) -> int | None:
    pid = claimed_int(token)
    return pid or None          # Open MPI prints PID 0 when it does not know it


@v_args(inline=True)
class _ToRecord(Transformer):
    def named_signal(self, *tokens):
        name = str(tokens[-1])
        return _Signal(knowledge.signal_number(name), "".join(map(str, tokens)), name)

    def numbered_signal(self, number):
        return _Signal(claimed_int(number), str(number), str(number))

    def elastic_closing(self, pid, signal, _end=None):
        return {"kind": Kind.SHUTDOWN, "severity": Severity.WARNING, "subject_pid": claimed_int(pid),
                "signal": knowledge.signal_name(signal.number) if signal.number else signal.printed}

    def elastic_forced_kill(self, pid, sent, forced, _end=None):
        return {"kind": Kind.SHUTDOWN, "severity": Severity.WARNING, "subject_pid": claimed_int(pid),
                "signal": knowledge.signal_name(forced.number) if forced.number else forced.name,
                "after_signal": knowledge.signal_name(sent.number)}

    def elastic_no_error_file(self, pid, rank, code, _end=None):
        return {"kind": Kind.CHILD_FAILED, "severity": Severity.ERROR, "subject_pid": claimed_int(pid),
                "local_rank": claimed_int(rank), **_exit(claimed_int(code))}

    def deepspeed_exit_ok(self, pid, _end=None):
        return {"kind": Kind.EXIT, "severity": Severity.INFO, "subject_pid": claimed_int(pid), "exit_code": 0}

    def launcher_signalled(self, name, _end=None):
        return {"kind": Kind.SIGNAL_RECEIVED, "severity": Severity.WARNING, "signal": str(name)}

    def mpi_noticed(self, tool, rank, pid, node, signal, *rest):
        return {"kind": Kind.CHILD_FAILED, "severity": Severity.ERROR, "launcher": str(tool),
                "subject_rank": claimed_int(rank), "subject_pid": _pid(pid), "subject_host": str(node),
                **_exit(-claimed_int(signal))}

    def mpi_exited_due(self, tool, rank, pid, _rest=None):
        return {"kind": Kind.CHILD_FAILED, "severity": Severity.ERROR, "launcher": str(tool),
                "subject_rank": claimed_int(rank), "subject_pid": _pid(pid)}

    def mpi_exited_node(self, node, how, _rest=None):
        return {"subject_host": str(node), "how": "called abort" if "abort" in how else "exited improperly"}

    def mpi_job_aborted(self, _job, count, _word, _rest=None):
        return {"kind": Kind.CHILD_FAILED, "severity": Severity.ERROR, "launcher": "mpirun",
                "children_failed": claimed_int(count)}

    def mpi_non_zero(self, tool, _rest=None):
        return {"kind": Kind.CHILD_FAILED, "severity": Severity.ERROR, "launcher": str(tool)}

    def mpi_process_name(self, job, rank):
        return {"subject_rank": claimed_int(rank), "process_name": f"{job},{rank}]"}

    def mpi_exit_code(self, code, _ws=None):
        return _exit(claimed_int(code))


def _exit(code: int) -> dict:
    out = {"exit_code": code}
    if code < 0:
        out["signal_name"] = knowledge.signal_name(code)
    return out


class RecordBlock:
    """One launcher record: its line, and for mpirun's boxed messages the box's lines
    (up to the closing ruler of dashes)."""

    format = "launcher-record"

    def __init__(self, rule: str, attrs: dict) -> None:
        self.rule = rule
        self.attrs = attrs
        self.lines: list[str] = []
        self.linenos: list[int] = []
        self.closed = False

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.closed or (self.lines and (self.rule not in _BOXED or header is not None)):
            return False
        if self.lines and len(self.lines) > _BOXED[self.rule] and not _box_ruler(text):
            return False            # past the message's own lines: only its closing ruler
        self.lines.append(text)
        self.linenos.append(lineno)
        if len(self.lines) > 1:
            if _box_ruler(text):
                self.closed = True
            else:
                for literal, rule in _IN_BOX:
                    found = _parse(text, rule) if literal in text else None
                    if found:
                        self.attrs.update(found)
                        break
        return True

    def close(self, make):
        attrs = dict(self.attrs)
        kind, severity = attrs.pop("kind"), attrs.pop("severity")
        message = self.lines[0].strip()
        event = make(kind, message, severity, {**attrs, "message_id": f"launcher-{self.rule.replace('_', '-')}"})
        tool = attrs.get("launcher")
        if tool and event.process is None and event.pid is None:
            event = replace(event, process=tool, role="launcher")    # the line names its writer
        return BlockResult([event], list(self.linenos))


def _record(text: str) -> RecordBlock | None:
    for trigger, rule in _TRIGGERS.items():
        if trigger in text:
            found = _parse(text.strip(), rule)
            if found is not None:
                return RecordBlock(rule, found)
    return None


def start(text: str, header: tuple | None = None):
    first = text[:1]
    if first in "=*" and _T.BORDER_LINE.match(text):
        return SummaryBlock(headed=True)
    if first in " \t[RFO" and header is None and _T.SUMMARY_OPENS.match(text):
        return SummaryBlock(headed=False)       # the summary is raw text, never a logger's record
    return _record(text)
