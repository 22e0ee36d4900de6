"""PyTorch Flight Recorder dumps: the per-rank record of the last collectives, read
without unpickling (unpickle.py), as typed values (dump.py), into events (reader.py)."""
