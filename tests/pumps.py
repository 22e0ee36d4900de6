"""Worst-case lines for a regex, derived from the regex itself, and a linearity check.

A backtracking regex is super-linear when some repeat is tried over a long run again
and again: from every start position of a search (``\\d+x`` on digits), from every copy
of its start that a line repeats (``X.*Y`` on ``XXXX...``), from every step of a lazy run
whose continuation rescans the rest (``.+?\\s*$`` on blanks), or because neighbouring
repeats accept the same characters and split a run every way (``\\s*\\S*\\s*$``).  Each
needs a line that reaches the repeat (text the pattern matches before it), then a long
run of characters the repeat accepts, then an end that makes the match fail.  ``pumps``
builds such lines for every long repeat of a pattern, from the re module's own parse of
it: each class of characters the repeat accepts that the pattern tells apart (those
the next part accepts too first), the reaching text and a run repeated as one unit, the
literal text after the repeat repeated, the pattern's samples repeated, bare runs.

``linear`` measures one operation on lines of N and 4N characters, in the same run, and
compares: linear work grows ~4x, quadratic ~16x.  CPU time of this process, measured
again before a bad ratio fails, and a floor under which nothing fails: timer noise
cannot fail it, and the machine's speed does not matter.

``re._parser`` is CPython's own (3.11+, as the possessive and atomic forms the data
files use).
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from re import _constants as C
from re import _parser as P
from typing import Callable, Iterable, Iterator

START = 256                # the first line, short: a cubic takes seconds on 2 KiB
LAST = 256 << 10           # the last: 256 KiB
RATIO = 12.0               # t(4N) / t(N): linear ~4 (~9 seen under load: memory growth), quadratic ~16
# Under this, t(4N) passes whatever the ratio: a pattern that costs under 5 ms at 256 KiB
# costs under ~80 ms at 1 MiB even if it were quadratic (and timer noise is this size)
FLOOR = 0.005
# A ratio between times this long (the longer line at least 64 KiB) is not noise
SETTLED = 0.001
SETTLES = 64 << 10
# Times measured again before a bad ratio fails
RETRIES = 5
# A hang guard, not the bound: linear work on 256 KiB takes a few ms to tens of ms
HANG = 1.0

# Characters a pump may be made of: the classes logs and patterns tell apart (blank,
# digit, hex and other letters in both cases, word and other punctuation, block and box
# characters of vLLM's logo, other non-ASCII, control characters).  The pattern's own
# literal characters are added to these per pattern.
UNIVERSE = (" \t07a9fgxzAFGZ_.,:;=-+/\\()[]{}<>'\"!@#$%&*?|~^`\x00\x1b\u00a0\u00e9\u2580\u2584\u2588\u2502"
            "\u200b")


@dataclass(frozen=True)
class Pump:
    """A line ``head + unit * k + tail`` of any length."""

    head: str
    unit: str
    tail: str

    def line(self, size: int) -> str:
        k = max(1, (size - len(self.head) - len(self.tail)) // len(self.unit))
        return self.head + self.unit * k + self.tail

    def __str__(self) -> str:
        return f"{self.head[:40]!r} + {self.unit[:40]!r} * k + {self.tail!r}"


# --- reading a pattern's parse tree (the re module's own parser) ------------------------

_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT}
_CATEGORIES = {
    C.CATEGORY_DIGIT: lambda c: c.isdigit() and unicodedata.decimal(c, None) is not None,
    C.CATEGORY_NOT_DIGIT: lambda c: not (c.isdigit() and unicodedata.decimal(c, None) is not None),
    C.CATEGORY_SPACE: lambda c: c.isspace(),
    C.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    C.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    C.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}


def _in_set(items, c: str) -> bool:
    negate = False
    hit = False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            hit = hit or ord(c) == av
        elif op is C.RANGE:
            hit = hit or av[0] <= ord(c) <= av[1]
        elif op is C.CATEGORY:
            hit = hit or _CATEGORIES[av](c)
    return hit != negate


def _accepts(op, av, flags: int, c: str) -> bool:
    """Whether the one-character node (op, av) accepts ``c``."""
    if op is C.ANY:
        return c != "\n" or bool(flags & C.SRE_FLAG_DOTALL)
    tests = {c, c.lower(), c.upper()} if flags & C.SRE_FLAG_IGNORECASE else {c}
    if op is C.LITERAL:
        return any(ord(t) == av for t in tests)
    if op is C.NOT_LITERAL:
        return all(ord(t) != av for t in tests)
    if op is C.IN:
        return any(_in_set(av, t) for t in tests)
    return False


def _flags_of(av, flags: int) -> int:
    _group, add, remove, _sub = av
    return (flags | add) & ~remove


def _nodes(seq, flags: int) -> Iterator[tuple[object, object, int]]:
    """Every node of a parse tree, with the flags in force there."""
    for op, av in seq:
        yield op, av, flags
        if op is C.SUBPATTERN:
            yield from _nodes(av[3], _flags_of(av, flags))
        elif op in _REPEATS:
            yield from _nodes(av[2], flags)
        elif op is C.BRANCH:
            for alt in av[1]:
                yield from _nodes(alt, flags)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            yield from _nodes(av[1], flags)
        elif op is C.ATOMIC_GROUP:
            yield from _nodes(av, flags)
        elif op is C.GROUPREF_EXISTS:
            yield from _nodes(av[1], flags)
            if av[2] is not None:
                yield from _nodes(av[2], flags)


def _example(seq, flags: int, pick: Callable[[object, object, int], str]) -> str:
    """A short text the sequence matches (lookarounds and back-references aside)."""
    out = []
    for op, av in seq:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            out.append(pick(op, av, flags))
        elif op is C.SUBPATTERN:
            out.append(_example(av[3], _flags_of(av, flags), pick))
        elif op in _REPEATS:
            out.append(_example(av[2], flags, pick) * av[0])
        elif op is C.BRANCH:
            out.append(_example(av[1][0], flags, pick))
        elif op is C.ATOMIC_GROUP:
            out.append(_example(av, flags, pick))
        elif op is C.GROUPREF_EXISTS:
            out.append(_example(av[1], flags, pick))
    return "".join(out)


def _nullable(seq) -> bool:
    for op, av in seq:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            return False
        if op is C.SUBPATTERN and not _nullable(av[3]):
            return False
        if op in _REPEATS and av[0] > 0 and not _nullable(av[2]):
            return False
        if op is C.BRANCH and not any(_nullable(alt) for alt in av[1]):
            return False
        if op is C.ATOMIC_GROUP and not _nullable(av):
            return False
    return True


def _first(seq, flags: int, alphabet: str) -> set[str]:
    """The characters of ``alphabet`` a match of the sequence can start with."""
    out: set[str] = set()
    for op, av in seq:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            return out | {c for c in alphabet if _accepts(op, av, flags, c)}
        if op is C.SUBPATTERN:
            inner = av[3]
            out |= _first(inner, _flags_of(av, flags), alphabet)
        elif op in _REPEATS:
            inner = av[2]
            out |= _first(inner, flags, alphabet)
            if av[0] == 0:
                continue
        elif op is C.BRANCH:
            for alt in av[1]:
                out |= _first(alt, flags, alphabet)
            inner = None if any(_nullable(alt) for alt in av[1]) else [(op, av)]
        elif op is C.ATOMIC_GROUP:
            inner = av
            out |= _first(inner, flags, alphabet)
        else:                           # AT, lookarounds, back-references: width 0 here
            continue
        if inner is not None and not _nullable(inner):
            return out
    return out


def _repeats(seq, flags: int, before: str, pick) -> Iterator[tuple[str, object, int, list]]:
    """(text that reaches it, repeat node, flags, what follows it) for every repeat."""
    for i, (op, av) in enumerate(seq):
        here = before + _example(seq[:i], flags, pick)
        if op in _REPEATS:
            yield here, av, flags, list(seq[i + 1:])
            yield from _repeats(av[2], flags, here, pick)
        elif op is C.SUBPATTERN:
            yield from _repeats(av[3], _flags_of(av, flags), here, pick)
        elif op is C.BRANCH:
            for alt in av[1]:
                yield from _repeats(alt, flags, here, pick)
        elif op in (C.ASSERT, C.ASSERT_NOT) and av[0] == 1:     # lookahead: runs from here
            yield from _repeats(av[1], flags, here, pick)
        elif op is C.ATOMIC_GROUP:
            yield from _repeats(av, flags, here, pick)
        elif op is C.GROUPREF_EXISTS:
            yield from _repeats(av[1], flags, here, pick)


def _glue(rest) -> str:
    """The literal text right after a repeat (what each of its stops must find)."""
    out = []
    for op, av in rest:
        if op is not C.LITERAL:
            break
        out.append(chr(av))
    return "".join(out)


MAX_PUMPS = 48             # per pattern, besides the extra ones: the most telling first


def pumps(pattern: str, flags: int = 0, samples: Iterable[str] = (), extra: Iterable[Pump] = ()) -> list[Pump]:
    """Lines that drive each unbounded (or long) repeat of ``pattern`` over long runs: the
    text that reaches the repeat, a run of each class of characters it accepts, and an
    end that fails it (a NUL almost nothing accepts, or the line's end); the reaching
    text and a run as one unit repeated; the pattern's samples repeated; bare runs."""
    tree = P.parse(pattern, flags)
    flags = tree.state.flags
    char_nodes = [(op, av, f) for op, av, f in _nodes(tree, flags) if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN)]
    # the pattern's literal characters may be what a run must hold to reach a deeper part
    literal = "".join(chr(av) for op, av, _f in char_nodes if op is C.LITERAL)
    literal += "".join(chr(bound) for op, av, _f in char_nodes if op is C.IN
                       for item_op, item in av if item_op is C.RANGE for bound in item)
    alphabet = "".join(dict.fromkeys(UNIVERSE + literal))

    # Characters that every part of the pattern treats alike behave alike: keep one of
    # each class (the first in the alphabet), so the pumps stay few
    def signature(c: str) -> tuple:
        return (c.isalnum() or c == "_",) + tuple(_accepts(op, av, f, c) for op, av, f in char_nodes)

    representative: dict[tuple, str] = {}
    for c in alphabet:
        representative.setdefault(signature(c), c)
    kinds = set(representative.values())

    def pick(op, av, f) -> str:
        for c in alphabet:
            if c in kinds and _accepts(op, av, f, c):
                return c
        return next((c for c in alphabet if _accepts(op, av, f, c)), "a")

    # Per repeat, its pumps from the most to the least telling; then the repeats take
    # turns, so that a pattern of many repeats has the first pumps of each
    groups: list[list[tuple[str, str, str]]] = []
    end = "\x00"
    for before, (_low, high, body), f, rest in _repeats(tree, flags, "", pick):
        if high is not C.MAXREPEAT and high < 64:
            continue                            # a short bounded repeat cannot make a long line slow
        accepted = sorted(c for c in _first(body, f, alphabet) if c in kinds)
        # first what the repeat and what follows it both accept (the two split a run
        # every way before they give up), then blanks, then the rest
        after = _first(rest, f, alphabet)
        units = sorted(accepted, key=lambda c: (c not in after, not c.isspace()))
        whole = _example(body, f, pick)
        if len(whole) > 1:
            units.append(whole)
        if not units:
            continue
        glue = _glue(rest)
        group = [(before, units[0], end)]
        if before:
            group.append(("", before + units[0], end))          # the search restarts at every copy
        if glue:
            group.append((before, glue, end))                   # a stop at every copy, each failing later
        group += [(before, unit, end) for unit in units[1:]]
        if before:
            group += [("", before, end)] + [("", before + unit, end) for unit in units[1:3]]
        if glue:
            group.append((before, units[0] + glue, end))
        group += [(before, unit, "") for unit in units]
        # NUL, blank, NUL: a run of non-blanks that takes the first NUL still does not end
        # the line (\S*\s*$ split every way)
        group.append((before, units[0], end + " " + end))
        groups.append(group)
    for sample in samples:
        if sample:
            groups.append([("", sample, ""), (sample, " ", end), ("", sample + " ", end), (sample, " ", "")])
    groups.append([("", c, end) for c in sorted(kinds)])      # bare runs: a search tried at every position

    out: dict[Pump, None] = dict.fromkeys(extra)
    chosen: dict[Pump, None] = {}
    turn = 0
    while len(chosen) < MAX_PUMPS and any(turn < len(g) for g in groups):
        for group in groups:
            if turn < len(group) and group[turn][1] and len(chosen) < MAX_PUMPS:
                chosen.setdefault(Pump(*group[turn]), None)
        turn += 1
    out.update(chosen)
    return list(out)


# --- measuring ----------------------------------------------------------------------------

def _cpu(fn: Callable[[str], object], line: str) -> float:
    started = time.process_time()
    fn(line)
    return time.process_time() - started


def linear(fn: Callable[[str], object], pump: Pump) -> str | None:
    """None when ``fn`` on the pump's lines grows like their length; else why not.

    The ratio t(4N) / t(N) is measured from N = 256 characters up, each step before the
    next: a pattern that is cubic or worse fails within a second on a short line instead
    of running for hours on a long one, and the first pair of times long enough to trust
    (or so short that even a square law could not take them past FLOOR at the last size)
    settles it.
    """
    little = _cpu(fn, pump.line(START))
    size = START
    while size < LAST:
        short, long = pump.line(size), pump.line(4 * size)
        big = _cpu(fn, long)
        if big > HANG:
            return f"{big:.2f} s on {_size(4 * size)} ({_size(size)}: {little * 1e3:.1f} ms)"
        if big >= SETTLED:
            # the ratio counts: the time on the shorter line once more, warm (a first run
            # on a longer line pays for fresh memory - the regex engine's stack, which glibc
            # maps anew until its threshold adapts - and could hide a square law)
            little = min(little, _cpu(fn, short))
        # a hiccup, or fresh memory again?  Measure both again, a few times, keep the best
        for _ in range(RETRIES):
            if big < FLOOR or big < RATIO * little:
                break
            little = min(little, _cpu(fn, short))
            big = min(big, _cpu(fn, long))
        else:
            if big >= FLOOR and big >= RATIO * little:
                return (f"{big / max(little, 1e-9):.1f}x the time for 4x the length "
                        f"({_size(size)}: {little * 1e3:.1f} ms, {_size(4 * size)}: {big * 1e3:.1f} ms)")
        grew_linearly = big < RATIO * little
        size, little = 4 * size, big
        if grew_linearly and ((big >= SETTLED and size >= SETTLES) or big * (LAST // size) ** 2 < FLOOR):
            return None
    return None


def _size(n: int) -> str:
    return f"{n >> 10} KiB" if n >= 1024 else f"{n} characters"
