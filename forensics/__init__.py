"""forensics: why did the multi-GPU inference server die?

    >>> import forensics
    >>> case = forensics.analyze("logs/")
    >>> case.verdict.headline
"""

__version__ = "0.2.0"


def analyze(*args, **kwargs):
    """Analyse crash evidence; see ``forensics.api.analyze``."""
    from forensics.api import analyze as _analyze
    return _analyze(*args, **kwargs)


def schema() -> dict:
    """The JSON schema every ``--format json`` report satisfies (forensics.report/1)."""
    import json
    from importlib import resources
    return json.loads(resources.files("forensics.data").joinpath("report.schema.json").read_text(encoding="utf-8"))


def __getattr__(name):
    if name == "NothingToAnalyse":
        from forensics.case import NothingToAnalyse
        return NothingToAnalyse
    if name == "KnowledgeBaseError":
        from forensics.kb import KnowledgeBaseError
        return KnowledgeBaseError
    raise AttributeError(name)
