"""forensics: why did the multi-GPU inference server die?"""

__version__ = "0.1.0"


def analyze(*paths):
    """Analyse crash evidence (directories, files, ``-``); returns a ``forensics.case.Case``.

    >>> case = forensics.analyze("logs/")
    >>> case.verdict["summary"], case.timeline.head()
    """
    from forensics.case import analyze as _analyze
    return _analyze(*paths)
