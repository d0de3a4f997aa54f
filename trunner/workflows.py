"""Workflows: tasks composed into chains, groups, chords and graphs, dispatched as one and run
across the group's runners with a nursery's semantics: a step that fails for good cancels
the others (fail-fast), and the workflow ends once every step it started has ended. See
[Workflows](workflows.md).

```python
from trunner.workflows import chain, chord, group, step

handle = await client.dispatch(chain(step(fetch, url), step(parse), step(store)))
count = await handle.result()
```
"""

from ._public import fixup_module_metadata
from ._workflows import MAX_NODES, Graph, Node, Step, chain, chord, graph, group, step

__all__ = ["MAX_NODES", "Graph", "Node", "Step", "chain", "chord", "graph", "group", "step"]

fixup_module_metadata(__name__, globals())
