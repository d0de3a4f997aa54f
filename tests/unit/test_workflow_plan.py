"""A workflow's values compiled to its plan (trunner/workflows/): nodes in topological
order, what each waits for and reads, who reads each result, the templates' parts."""

from __future__ import annotations

import pytest

import trunner
from trunner._wire.workflow import Literal, Results, encode_template
from trunner._workflows import chain, chord, compile_plan, exit_parts, group, step

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
