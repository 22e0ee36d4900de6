"""Input formats a user may force with ``--kind`` (kept light: the CLI imports it early)."""

# --kind value -> the parser that reads it (the text formats share the line parser)
FORCEABLE = {"vllm-log": "text", "python-traceback": "text", "kernel-log": "text", "nccl-log": "text",
             "faulthandler": "text", "py-spy": "text", "text": "text", "compute-sanitizer": "compute-sanitizer",
             "compute-sanitizer-xml": "compute-sanitizer-xml", "cuda-gdb": "cuda-gdb",
             "cuda-coredump": "cuda-coredump", "elf-core": "elf-core"}
