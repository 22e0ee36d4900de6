"""The analysis: a list of named rules run in order over one Context.

Order matters only where a rule reads another's conclusion (the origin before the first
failure, statuses before next steps); each rule documents itself in its docstring.
"""

from forensics.rules.advice import NextSteps, Signature, Summary
from forensics.rules.base import Context, Rule
from forensics.rules.checklist import Checklist
from forensics.rules.environment import Environment
from forensics.rules.errors import ReportedError, SurfacePoints
from forensics.rules.failure import CollectiveHang, FirstFailureRule, RankStatuses
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
    NextSteps,
    Signature,
    KnownIssues,
    Checklist,
    Summary,
)


def run(ctx: Context) -> Context:
    for rule_class in PIPELINE:
        rule_class().apply(ctx)
    return ctx


__all__ = ["PIPELINE", "Context", "Rule", "run"]
