"""A workflow's values compiled to its plan (trunner/workflows/): nodes in topological
order, what each waits for and reads, who reads each result, the templates' parts; graphs
and what they refuse when built."""

from __future__ import annotations

import pytest

import trunner
from trunner._wire.workflow import Literal, Results, encode_template
from trunner._workflows import (
    Graph,
    chain,
    chord,
    compile_plan,
    exit_parts,
    graph,
    group,
    step,
)

tasks = trunner.TaskRegistry()


@tasks.task()
async def fetch(url: str) -> str:
    return url


@tasks.task()
async def parse(page: str) -> int:
    return len(page)


@tasks.task()
async def total(counts: list[int]) -> int:
    return sum(counts)


@tasks.task()
async def double(number: int) -> int:
    return 2 * number


def test_a_chain_is_a_line_each_reading_the_one_before() -> None:
    plan = compile_plan(chain(step(fetch, "u"), step(parse), step(double)))
    assert [n.waits_for for n in plan.nodes] == [(), (0,), (1,)]
    assert [n.reads for n in plan.nodes] == [None, 0, 1]
    assert plan.output == 2
    assert plan.readers == (1, 1, 1), "one reader each; the last is the workflow's result"
    assert [plan.next_of(i) for i in range(3)] == ["1", "2", ""]
    assert plan.output_spec() == "2"


def test_a_chord_fans_in_and_its_children_are_one_range() -> None:
    plan = compile_plan(chord(group(step(parse, str(i)) for i in range(4)), step(total)))
    callback = plan.nodes[4]
    assert callback.waits_for == (0, 1, 2, 3)
    assert callback.reads == (0, 1, 2, 3)
    assert [plan.next_of(i) for i in range(5)] == ["4", "4", "4", "4", ""]
    template = encode_template(exit_parts(callback.reads))
    assert template == b"L1:[R0-3,1:,L1:]"


def test_a_bound_step_waits_without_reading() -> None:
    plan = compile_plan(chain(step(fetch, "a"), step(fetch, "b")))
    assert plan.nodes[1].waits_for == (0,)
    assert plan.nodes[1].reads is None
    assert plan.readers == (0, 1), "nobody reads the first result: it is not kept"


def test_groups_nest_and_a_step_after_them_reads_the_nested_lists() -> None:
    inner = group([step(parse), step(parse)])
    plan = compile_plan(chain(step(fetch, "u"), group([inner, step(parse)]), step("total")))
    assert plan.nodes[4].reads == ((1, 2), 3)
    assert plan.readers[0] == 3, "three steps read the fetched page"
    assert encode_template(exit_parts(((1, 2), 3))) == b"L2:[[R1-2,1:,L2:],R3-3,1:,L1:]"
    assert plan.output_spec() == "4"


def test_a_group_as_the_whole_workflow_gives_its_list() -> None:
    plan = compile_plan(group(step(fetch, str(i)) for i in range(3)))
    assert plan.output == (0, 1, 2)
    assert plan.output_spec() == "[0,1,2]"
    assert plan.readers == (1, 1, 1)


def test_the_last_steps_of_a_groups_chains_are_its_outputs() -> None:
    # A group whose members are chains: the result of each chain's last step is read by
    # nobody but the workflow.
    plan = compile_plan(group([chain(step(fetch, "a"), step(parse)), step(fetch, "b")]))
    assert plan.output == (1, 2)
    assert plan.readers == (1, 1, 1)


def test_an_open_first_step_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"step\(task, payload\)"):
        compile_plan(chain(step(fetch), step(parse)))


def test_too_many_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 3 steps"):
        compile_plan(group(step(fetch, str(i)) for i in range(4)), max_nodes=3)


def test_bad_pieces_are_refused_when_built() -> None:
    with pytest.raises(TypeError, match="made of steps"):
        chain(step(fetch, "u"), fetch)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="at least one step"):
        group([])
    with pytest.raises(TypeError, match="a step runs a task"):
        step(42)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="timeout"):
        step(fetch, "u", timeout=-1)


def test_ranges_of_successors_are_written_short() -> None:
    plan = compile_plan(chain(step(fetch, "u"), group([step(parse) for _ in range(5)])))
    assert plan.next_of(0) == "1-5"
    assert exit_parts((1, 2, 4)) == [
        Literal(b"["),
        Results(1, 2, b","),
        Literal(b","),
        Results(4, 4, b","),
        Literal(b"]"),
    ]


@tasks.task()
async def pair(both: tuple[int, int]) -> int:
    return both[0] + both[1]


def test_a_diamond_fans_out_and_joins_its_parents_in_their_order() -> None:
    g = Graph()
    a = g.add(step(fetch, "u"))
    b = g.then(a, step(parse))
    c = g.then(a, step(parse))
    d = g.join(step(pair), c, b)
    plan = compile_plan(g.returning(d))
    assert [n.waits_for for n in plan.nodes] == [(), (0,), (0,), (1, 2)]
    assert [n.reads for n in plan.nodes] == [None, 0, 0, (2, 1)], "d reads [c's, b's]"
    assert plan.successors == ((1, 2), (3,), (3,), ())
    assert [plan.next_of(i) for i in range(4)] == ["1-2", "3", "3", ""]
    assert plan.readers == (2, 1, 1, 1), "a is read by b and c"
    assert plan.output_spec() == "3"
    assert encode_template(exit_parts((2, 1))) == b"L1:[R2-2,1:,L1:,R1-1,1:,L1:]"


def test_the_dict_form_is_the_same_graph_in_an_order_where_parents_come_first() -> None:
    wf = graph(
        {
            "d": (step(pair), ["c", "b"]),
            "a": step(fetch, "u"),
            "b": (step(parse), "a"),
            "c": (step(parse), "a"),
        }
    )
    plan = compile_plan(wf)
    assert [n.step.task for n in plan.nodes] == [fetch, parse, parse, pair]
    assert [n.reads for n in plan.nodes] == [None, 0, 0, (2, 1)]
    assert plan.output == 3, "its one node that nothing reads"


def test_a_join_of_one_parent_reads_a_list_and_then_reads_the_value() -> None:
    g = Graph()
    a = g.add(step(fetch, "u"))
    listed = g.join(step("total"), a)
    plain = g.then(a, step(parse))
    plan = compile_plan(g.returning(listed, plain))
    assert [n.reads for n in plan.nodes] == [None, (0,), 0]
    assert plan.output_spec() == "[1,2]", "several returned nodes: the list of theirs"
    assert plan.readers == (2, 1, 1)


def test_every_node_runs_and_one_nobody_reads_keeps_no_result() -> None:
    wf = graph({"a": step(fetch, "u"), "b": (step(parse), "a"), "side": step(fetch, "v")},
               returning="b")  # fmt: skip
    plan = compile_plan(wf)
    assert len(plan.nodes) == 3
    assert plan.readers == (1, 1, 0)


def test_a_node_may_be_a_composite_and_its_exit_is_what_it_gives() -> None:
    g = Graph()
    a = g.add(chain(step(fetch, "u"), step(parse)))
    fan = g.then(a, group([step(double), step(double)]))
    d = g.join(step("report"), a, fan)
    plan = compile_plan(g.returning(d))
    assert [n.waits_for for n in plan.nodes] == [(), (0,), (1,), (1,), (1, 2, 3)]
    assert plan.nodes[4].reads == (1, (2, 3)), "a's last step, then the group's list"


def test_a_graph_nests_in_a_chain_its_first_nodes_wait_for_what_comes_before() -> None:
    g = Graph()
    a = g.add(step(fetch, "a"))
    b = g.add(step(fetch, "b"))
    inner = g.returning(g.join(step("pair"), a, b))
    plan = compile_plan(chain(step(fetch, "first"), inner, step(double)))
    assert [n.waits_for for n in plan.nodes] == [(), (0,), (0,), (1, 2), (3,)]
    assert [n.reads for n in plan.nodes] == [None, None, None, (1, 2), 3]
    assert plan.output == 4
    outer = graph({"x": inner, "y": (step(double), "x")})
    assert compile_plan(outer).output == 3, "and in another graph"


def test_what_follows_a_graph_waits_for_every_node_of_it_as_a_nursery_does() -> None:
    g = Graph()
    a = g.add(step(fetch, "u"))
    b = g.then(a, step(parse))
    g.then(a, step(fetch))  # a side node: nothing reads it
    plan = compile_plan(chain(g.returning(b), step(double), step(double)))
    assert [n.waits_for for n in plan.nodes] == [(), (0,), (0,), (1, 2), (3,)]
    assert [n.reads for n in plan.nodes] == [None, 0, 0, 1, 3], "it reads only b"
    assert plan.readers == (2, 1, 0, 1, 1)
    inner = graph({"x": g.returning(b), "y": (step(double), "x")})
    nested = compile_plan(chain(inner, step(double)))
    assert nested.nodes[3].waits_for == (1, 2), "y waits for the inner graph's side node"
    assert nested.nodes[4].waits_for == (3,)


def test_a_parent_joined_twice_is_read_twice() -> None:
    g = Graph()
    a = g.add(step(double, 5))
    twice = g.join(step("pair"), a, a)
    plan = compile_plan(g.returning(twice, a))
    assert plan.nodes[1].reads == (0, 0)
    assert plan.readers == (3, 1), "released once per read, and the workflow's result"


def test_nodes_added_after_returning_are_not_in_the_graph() -> None:
    g = Graph()
    a = g.add(step(fetch, "u"))
    wf = g.returning(a)
    g.then(a, step(parse))
    assert len(compile_plan(wf).nodes) == 1


def test_what_cannot_run_is_refused_when_the_graph_is_built() -> None:
    with pytest.raises(ValueError, match="'a' -> 'b' -> 'a' make a cycle"):
        graph({"top": step(fetch, "u"), "a": (step(parse), ["b"]), "b": (step(parse), "a")})
    with pytest.raises(ValueError, match="'a' -> 'a' make a cycle"):
        graph({"a": (step(parse), "a")})
    with pytest.raises(ValueError, match="node 'c' reads 'x', which is not a node"):
        graph({"a": step(fetch, "u"), "c": (step(pair), ["a", "x"])})
    with pytest.raises(ValueError, match="at least one node"):
        graph({})
    with pytest.raises(ValueError, match="node 'a' has no parents and no payload"):
        graph({"a": step(parse)})
    with pytest.raises(ValueError, match="'a', 'b' are read by no other"):
        graph({"a": step(fetch, "u"), "b": step(fetch, "v")})
    with pytest.raises(ValueError, match="returning='z' names no node"):
        graph({"a": step(fetch, "u")}, returning="z")
    with pytest.raises(TypeError, match="node 'a' is a step"):
        graph({"a": fetch})  # type: ignore[dict-item]
    g, other = Graph(), Graph()
    first = g.add(step(fetch, "u"), name="first")
    with pytest.raises(ValueError, match=r"#1 \(parse\) has no parents and no payload"):
        g.add(step(parse))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reads node 'first', which is a node of another graph"):
        other.then(first, step(parse))
    with pytest.raises(ValueError, match="node 'first': a node of this graph has that name"):
        g.add(step(fetch, "v"), name="first")
    again = step(parse)
    g.then(first, again)
    with pytest.raises(ValueError, match=r"its step is node #1 \(parse\) already"):
        g.then(first, again)
    with pytest.raises(ValueError, match="at least one parent"):
        g.join(step(total))
    with pytest.raises(ValueError, match="returning"):
        g.returning()  # type: ignore[call-overload]
