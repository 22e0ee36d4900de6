"""The analysis: the named rules, in the order they run.

Adding a rule: its module (a ``Rule`` subclass whose docstring documents it, with
``reads``/``writes``), one line in ``PIPELINE``, and unit tests on hand-built evidence.
The order is checked: a rule may read only what earlier rules wrote.
"""

from forensics.rules.advice import GraphReplay, Headline, NextSteps, Signature
from forensics.rules.capture import StepsInFlight
from forensics.rules.base import Evidence, Rule, SourceFacts, check_order, run as run_pipeline
from forensics.rules.checklist import Checklist
from forensics.rules.environment import Environment
from forensics.rules.errors import ReportedError, SurfacePoints
from forensics.rules.failure import CollectiveHang, FirstFailureRule, RankStatuses
from forensics.rules.hardware import HardwareOrSoftware
from forensics.rules.known_issues import KnownIssues
from forensics.rules.origin import DeviceOrigin

PIPELINE: tuple[type[Rule], ...] = (
    Environment,
    ReportedError,
    SurfacePoints,
    DeviceOrigin,
    CollectiveHang,
    FirstFailureRule,
    RankStatuses,
    StepsInFlight,
    HardwareOrSoftware,
    GraphReplay,
    Signature,
    KnownIssues,
    NextSteps,
    Checklist,
    Headline,
)

check_order(PIPELINE)


def run(evidence: Evidence):
    return run_pipeline(PIPELINE, evidence)


__all__ = ["PIPELINE", "Evidence", "Rule", "SourceFacts", "run"]
