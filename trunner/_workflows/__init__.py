"""Workflows as values (their steps, chains, groups and graphs) and their compiled plans: the
values layer of workflows, public through :mod:`trunner.workflows`; the producer
dispatches a plan (``trunner._producer.workflows``)."""

from ._graph import Graph, GraphNode, GraphStep, Node, graph
from ._plan import MAX_NODES, Exit, Plan, PlanNode, compile_plan, exit_parts
from ._steps import OPEN, Chain, Group, Step, TaskStep, chain, chord, group, step

__all__ = [
    "MAX_NODES",
    "OPEN",
    "Chain",
    "Exit",
    "Graph",
    "GraphNode",
    "GraphStep",
    "Group",
    "Node",
    "Plan",
    "PlanNode",
    "Step",
    "TaskStep",
    "chain",
    "chord",
    "compile_plan",
    "exit_parts",
    "graph",
    "group",
    "step",
]
