"""Workflows as values (their steps, chains and groups) and their compiled plans: the
values layer of workflows, public through :mod:`trunner.workflows`; the producer
dispatches a plan (``trunner._producer.workflows``)."""

from ._plan import MAX_NODES, Exit, Plan, PlanNode, compile_plan, exit_parts
from ._steps import OPEN, Chain, Group, Step, TaskStep, chain, chord, group, step

__all__ = [
    "MAX_NODES",
    "OPEN",
    "Chain",
    "Exit",
    "Group",
    "Plan",
    "PlanNode",
    "Step",
    "TaskStep",
    "chain",
    "chord",
    "compile_plan",
    "exit_parts",
    "group",
    "step",
]
