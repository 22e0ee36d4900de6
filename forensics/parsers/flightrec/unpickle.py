"""A pickle reader that builds plain data only, and refuses everything else.

A Flight Recorder dump is a pickle (PyTorch's own pickler writes it: protocol 2, dicts,
lists, tuples, strings, integers, floats, booleans and None, with strings and frame
dicts shared through the memo).  ``pickle.load`` would run whatever a file names - one
GLOBAL and one REDUCE make ``os.system`` - and a dump comes from the crashed machine,
whoever could write there.  So the dump is never given to ``pickle``: this reader walks
its opcodes itself and knows only the ones that build those plain values.  An opcode
that imports a name, calls or builds an object, or reads an extension or a persistent
id is refused before anything else happens, with its name and offset.

Everything is bounded before it is allocated, so that a hostile file costs at most a
few hundred megabytes and a time proportional to its size:

- the input's bytes (``Limits.bytes``), and a length prefix is checked against the bytes
  left before anything is read (a string that claims 2**60 bytes is refused at once);
- each string's length, an integer's bytes, the objects built, the memo's entries;
- the *expanded* size of every value, as a walk over it would count it: the memo lets
  a 1 KiB pickle hold a list of a list of ... each repeated a thousand times (a
  "billion laughs"), which costs nothing to build and forever to walk.  Each container
  carries its expanded size and nesting depth, summed when something is put into it;
  so that the sums stay true, a value put into a container is sealed (it can no longer
  be changed: a later SETITEMS on it is refused), which also makes cycles impossible;
- dict keys are strings (every key of a dump is): the hash of a string is randomised per
  process, that of an int or a tuple is not, and keys made to share one hash would make
  every insert walk all the others.

``steps`` counts the work done (opcodes plus items moved), for tests that check the
cost is bounded without timing it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


class PickleRefused(ValueError):
    """The input is not a pickle of plain data within the limits: the reason, with the
    byte offset where it was found (``steps``: the work done until then)."""

    def __init__(self, message: str, steps: int = 0) -> None:
        super().__init__(message)
        self.steps = steps


@dataclass(frozen=True)
class Limits:
    bytes: int = 128 << 20           # the whole input
    string: int = 1 << 20            # one str or bytes value
    objects: int = 2_000_000         # values built (memo references and DUP are not new values)
    expanded: int = 16_000_000       # the expanded size of any one value (shared parts counted each time)
    depth: int = 32                  # containers nested in containers
    int_bytes: int = 16              # LONG1/LONG4 payload (an int64 needs 8)


# Opcodes refused, with what they would do: the reason on the problem line.
_REFUSED = {
    b"c": "GLOBAL (imports a Python name)",
    b"\x93": "STACK_GLOBAL (imports a Python name)",
    b"R": "REDUCE (calls a function)",
    b"b": "BUILD (sets an object's state)",
    b"i": "INST (builds an object of a named class)",
    b"o": "OBJ (builds an object)",
    b"\x81": "NEWOBJ (builds an object)",
    b"\x92": "NEWOBJ_EX (builds an object)",
    b"\x82": "EXT1 (imports a registered extension)",
    b"\x83": "EXT2 (imports a registered extension)",
    b"\x84": "EXT4 (imports a registered extension)",
    b"P": "PERSID (asks the loader for an outside object)",
    b"Q": "BINPERSID (asks the loader for an outside object)",
    b"\x97": "NEXT_BUFFER (an out-of-band buffer)",
    b"\x98": "READONLY_BUFFER (an out-of-band buffer)",
}
# Opcodes of plain values that no Flight Recorder dump uses (protocol 0's text forms,
# Python 2 strings, sets, bytearrays): refused too, so that the reader stays small.
_UNUSED = {
    b"I": "INT", b"L": "LONG", b"S": "STRING", b"T": "BINSTRING", b"U": "SHORT_BINSTRING", b"V": "UNICODE",
    b"F": "FLOAT", b"p": "PUT", b"g": "GET", b"\x8f": "EMPTY_SET", b"\x90": "ADDITEMS", b"\x91": "FROZENSET",
    b"\x96": "BYTEARRAY8",
}

_SCALARS = (str, bytes, int, float, bool, type(None))


class _Mark:
    """The MARK on the stack (a sentinel no value can equal)."""


_MARK = _Mark()


class _Reader:
    def __init__(self, data: bytes, limits: Limits) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.limits = limits
        self.stack: list = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        # id(container) -> [expanded size, depth, sealed]; the containers are kept alive in
        # ``alive`` so that an id is never reused while the table holds it
        self.meta: dict[int, list] = {}
        self.alive: list = []
        self.objects = 0
        self.steps = 0

    # -- reading bytes ---------------------------------------------------------------

    def fail(self, why: str, at: int | None = None) -> PickleRefused:
        return PickleRefused(f"{why} (at byte {self.pos if at is None else at:,})", self.steps)

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or n > len(self.data) - self.pos:
            raise self.fail(f"cut short: {what} needs {n:,} bytes, {len(self.data) - self.pos:,} are left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unsigned(self, n: int, what: str) -> int:
        return int.from_bytes(self.take(n, what), "little")

    def text(self, n: int, what: str) -> str:
        self.check_string(n, what)
        # (PyTorch writes UTF-8; a byte that is not becomes U+FFFD, as everywhere else)
        return str(self.take(n, what), "utf-8", "replace")

    def check_string(self, n: int, what: str) -> None:
        if n > self.limits.string:
            raise self.fail(f"{what} claims {n:,} bytes, more than the {self.limits.string:,} a string may have")

    # -- values --------------------------------------------------------------------

    def new(self, value) -> None:
        self.objects += 1
        if self.objects > self.limits.objects:
            raise self.fail(f"more than {self.limits.objects:,} values")
        if not isinstance(value, _SCALARS):
            self.meta[id(value)] = [1, 1, False]
            self.alive.append(value)
        self.push(value)

    def push(self, value) -> None:
        """Onto the stack; DUP and memo references add no value but still take room."""
        if len(self.stack) >= self.limits.objects:
            raise self.fail(f"more than {self.limits.objects:,} values on the stack")
        self.stack.append(value)

    def size_of(self, value) -> tuple[int, int]:
        meta = self.meta.get(id(value))
        return (1, 0) if meta is None else (meta[0], meta[1])

    def adopt(self, parent, children) -> None:
        """Account for ``children`` going into ``parent`` (its size and depth), sealing them."""
        meta = self.meta[id(parent)]
        if meta[2]:
            raise self.fail("a container is changed after it was put into another one (refused: the sizes "
                            "counted for it would no longer hold)")
        for child in children:
            if child is parent:
                raise self.fail("a container is put into itself")
            size, depth = self.size_of(child)
            meta[0] += size
            if depth + 1 > meta[1]:
                meta[1] = depth + 1
            child_meta = self.meta.get(id(child))
            if child_meta is not None:
                child_meta[2] = True
        if meta[0] > self.limits.expanded:
            raise self.fail(f"a value expands to more than {self.limits.expanded:,} items (shared parts counted "
                            "each time: a memo bomb)")
        if meta[1] > self.limits.depth:
            raise self.fail(f"values nested more than {self.limits.depth} deep")

    def key(self, value):
        # Every key of a dump is a string.  Other keys are refused: an int's hash is not
        # randomised, and many ints of one hash (equal modulo 2**61 - 1) would make each
        # insert walk all the others - quadratic time from a small file.
        if type(value) is not str:
            raise self.fail(f"a dictionary key is a {type(value).__name__}, not a string")
        return value

    def pop_mark(self) -> list:
        if not self.marks:
            raise self.fail("an opcode needs a MARK that is not there")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        self.steps += len(items)
        return items

    def top(self, what: str):
        if not self.stack:
            raise self.fail(f"{what} on an empty stack")
        return self.stack[-1]

    def pop(self, what: str):
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise self.fail(f"{what} needs a value that is not there")
        return self.stack.pop()

    def memo_put(self, index: int) -> None:
        if len(self.memo) >= self.limits.objects and index not in self.memo:
            raise self.fail("the memo holds too many entries")
        self.memo[index] = self.top("a memo PUT")

    def memo_get(self, index: int) -> None:
        if index not in self.memo:
            raise self.fail(f"memo entry {index} is used before it is set")
        self.push(self.memo[index])

    def set_items(self, target, items: list) -> None:
        if not isinstance(target, dict):
            raise self.fail(f"SETITEM(S) on a {type(target).__name__}")
        if len(items) % 2:
            raise self.fail("SETITEMS with an odd number of values")
        self.adopt(target, items)
        for i in range(0, len(items), 2):
            target[self.key(items[i])] = items[i + 1]

    def append_items(self, target, items: list) -> None:
        if not isinstance(target, list):
            raise self.fail(f"APPEND(S) on a {type(target).__name__}")
        self.adopt(target, items)
        target.extend(items)

    def tuple_of(self, items: list) -> None:
        value = tuple(items)
        self.new(value)
        self.adopt(value, items)

    # -- the loop ------------------------------------------------------------------

    def run(self):
        if len(self.data) > self.limits.bytes:
            raise PickleRefused(f"{len(self.data):,} bytes, more than the {self.limits.bytes:,} a dump may have")
        while True:
            at = self.pos
            op = bytes(self.take(1, "an opcode"))
            self.steps += 1
            if op in _REFUSED:
                raise self.fail(f"opcode {_REFUSED[op]}: refused, nothing was loaded", at)
            if op in _UNUSED:
                raise self.fail(f"opcode {_UNUSED[op]}, which no Flight Recorder dump uses: refused", at)
            handler = _HANDLERS.get(op)
            if handler is None:
                raise self.fail(f"byte {op!r} is no pickle opcode", at)
            if handler(self):
                break
        if len(self.stack) != 1 or self.marks:
            raise self.fail("STOP with values or a MARK left over")
        return self.stack[0]


def _proto(r: _Reader) -> None:
    version = r.unsigned(1, "PROTO")
    if version > 5:
        raise r.fail(f"pickle protocol {version} (at most 5 exists)")


def _frame(r: _Reader) -> None:
    size = r.unsigned(8, "FRAME")
    if size > len(r.data) - r.pos:
        raise r.fail(f"cut short: a frame of {size:,} bytes, {len(r.data) - r.pos:,} are left")


def _long(r: _Reader, n: int) -> None:
    if n > r.limits.int_bytes:
        raise r.fail(f"an integer of {n:,} bytes, more than {r.limits.int_bytes}")
    r.new(int.from_bytes(r.take(n, "LONG"), "little", signed=True))


def _long4(r: _Reader) -> None:
    (n,) = struct.unpack("<i", r.take(4, "LONG4"))
    _long(r, n)


def _dup(r: _Reader) -> None:
    r.push(r.top("DUP"))


def _mark(r: _Reader) -> None:
    # open MARKs are open containers: as many as the nesting allows, and a few more
    if len(r.marks) > 2 * r.limits.depth:
        raise r.fail(f"more than {2 * r.limits.depth} MARKs open")
    r.marks.append(len(r.stack))


def _pop(r: _Reader) -> None:
    if r.marks and len(r.stack) == r.marks[-1]:
        r.marks.pop()           # POP of a MARK (pickletools allows it)
    else:
        r.pop("POP")


def _bytes(r: _Reader, n: int, what: str) -> None:
    r.check_string(n, what)
    r.new(bytes(r.take(n, what)))


def _stop(_r: _Reader) -> bool:
    return True


def _append(r: _Reader) -> None:
    value = r.pop("APPEND")
    r.append_items(r.top("APPEND"), [value])


def _appends(r: _Reader) -> None:
    items = r.pop_mark()
    r.append_items(r.top("APPENDS"), items)


def _setitem(r: _Reader) -> None:
    value = r.pop("SETITEM")
    key = r.pop("SETITEM")
    r.set_items(r.top("SETITEM"), [key, value])


def _setitems(r: _Reader) -> None:
    items = r.pop_mark()
    r.set_items(r.top("SETITEMS"), items)


def _list(r: _Reader) -> None:
    items = r.pop_mark()
    r.new([])
    r.append_items(r.stack[-1], items)


def _dict(r: _Reader) -> None:
    items = r.pop_mark()
    r.new({})
    r.set_items(r.stack[-1], items)


def _tuple_n(n: int):
    def handler(r: _Reader) -> None:
        if len(r.stack) - (r.marks[-1] if r.marks else 0) < n:
            raise r.fail(f"TUPLE{n} needs {n} values")
        items = r.stack[len(r.stack) - n:] if n else []
        del r.stack[len(r.stack) - n:]
        r.tuple_of(items)
    return handler


def _memoize(r: _Reader) -> None:
    r.memo_put(len(r.memo))


_HANDLERS = {
    b"\x80": _proto,
    b"\x95": _frame,
    b".": _stop,
    b"(": _mark,
    b"0": _pop,
    b"1": lambda r: r.pop_mark() and None,
    b"2": _dup,
    b"N": lambda r: r.new(None),
    b"\x88": lambda r: r.new(True),
    b"\x89": lambda r: r.new(False),
    b"J": lambda r: r.new(struct.unpack("<i", r.take(4, "BININT"))[0]),
    b"K": lambda r: r.new(r.unsigned(1, "BININT1")),
    b"M": lambda r: r.new(r.unsigned(2, "BININT2")),
    b"\x8a": lambda r: _long(r, r.unsigned(1, "LONG1")),
    b"\x8b": _long4,
    b"G": lambda r: r.new(struct.unpack(">d", r.take(8, "BINFLOAT"))[0]),
    b"X": lambda r: r.new(r.text(r.unsigned(4, "BINUNICODE"), "a string")),
    b"\x8c": lambda r: r.new(r.text(r.unsigned(1, "SHORT_BINUNICODE"), "a string")),
    b"\x8d": lambda r: r.new(r.text(r.unsigned(8, "BINUNICODE8"), "a string")),
    b"B": lambda r: _bytes(r, r.unsigned(4, "BINBYTES"), "a bytes value"),
    b"C": lambda r: _bytes(r, r.unsigned(1, "SHORT_BINBYTES"), "a bytes value"),
    b"\x8e": lambda r: _bytes(r, r.unsigned(8, "BINBYTES8"), "a bytes value"),
    b"]": lambda r: r.new([]),
    b"}": lambda r: r.new({}),
    b")": _tuple_n(0),
    b"\x85": _tuple_n(1),
    b"\x86": _tuple_n(2),
    b"\x87": _tuple_n(3),
    b"t": lambda r: r.tuple_of(r.pop_mark()),
    b"l": _list,
    b"d": _dict,
    b"a": _append,
    b"e": _appends,
    b"s": _setitem,
    b"u": _setitems,
    b"q": lambda r: r.memo_put(r.unsigned(1, "BINPUT")),
    b"r": lambda r: r.memo_put(r.unsigned(4, "LONG_BINPUT")),
    b"\x94": _memoize,
    b"h": lambda r: r.memo_get(r.unsigned(1, "BINGET")),
    b"j": lambda r: r.memo_get(r.unsigned(4, "LONG_BINGET")),
}


@dataclass(frozen=True)
class Loaded:
    value: object
    steps: int          # opcodes run plus items moved: the work done
    objects: int        # values built


def loads(data: bytes, limits: Limits = Limits()) -> Loaded:
    """The plain value a pickle holds; PickleRefused when it holds anything else or
    passes a limit.  Nothing named in the data is ever imported or called."""
    reader = _Reader(data, limits)
    try:
        value = reader.run()
    except RecursionError:          # pragma: no cover - nothing here recurses; kept as a last guard
        raise PickleRefused("values nested too deep") from None
    return Loaded(value, reader.steps, reader.objects)
