import logging
import sys
import threading

_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
_DATEFMT = "%m-%d %H:%M:%S"


class NewLineFormatter(logging.Formatter):
    """vLLM's formatter: repeats the header on every continuation line."""

    def format(self, record):
        msg = logging.Formatter.format(self, record)
        if record.message != "":
            parts = msg.split(record.message)
            msg = msg.replace("\n", "\r\n" + parts[0])
        return msg


class PrefixedStream:
    """Like vLLM's _add_prefix: puts '(<proc> pid=<pid>) ' in front of every line."""

    def __init__(self, stream, prefix):
        self.stream = stream
        self.prefix = prefix
        self.at_line_start = True
        self.lock = threading.Lock()

    def write(self, s):
        if not s:
            return 0
        with self.lock:
            out = []
            for piece in s.splitlines(keepends=True):
                if self.at_line_start:
                    out.append(self.prefix)
                out.append(piece)
                self.at_line_start = piece.endswith("\n")
            self.stream.write("".join(out))
            self.stream.flush()
        return len(s)

    def flush(self):
        self.stream.flush()


class Tee:
    """Writes to the pipe the engine reads and to the worker's own log file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
            st.flush()
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


def init_logger(name: str, stream=None) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.StreamHandler(stream if stream is not None else sys.stdout)
    handler.setFormatter(NewLineFormatter(_FORMAT, _DATEFMT))
    logger.handlers[:] = [handler]
    return logger
