"""Reading a task's record and its look (trunner/_wire/record.py, handles.status_of): values
written by something else read as unknown, never as an exception."""

from __future__ import annotations

import datetime

import pytest

from trunner import TaskState
from trunner._redis import TaskLook
from trunner._waiting.protocol import status_of
from trunner._wire.envelope import encode_message
from trunner._wire.record import read_record

NOT_NUMBERS = [b"nan", b"NaN", b"inf", b"-inf", b"1e400", b"-1e400", b"", b"many", b"\xff"]


def look(record: dict[bytes, bytes] | None = None, **fields: object) -> TaskLook:
    values: dict[str, object] = {
        "record": record or {},
        "due_ms": None,
        "delayed": None,
        "entry_id": None,
        "entry": None,
        "consumer": None,
        "deliveries": 0,
        "delivered": False,
    }
    values.update(fields)
    return TaskLook(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize(
    "name", ["attempt", "progress", "enqueued_at", "started_at", "finished_at"]
)
def test_a_numeric_field_that_is_not_a_finite_number_reads_as_unknown(
    name: str, value: bytes
) -> None:
    record = {b"state": b"succeeded", b"task": b"t", b"attempt": b"2", name.encode(): value}
    status = read_record("id", record)
    assert status is not None
    assert status.state is TaskState.SUCCEEDED
    assert getattr(status, name) is None
    assert status_of("id", look(record)).state is TaskState.SUCCEEDED


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("attempt", b"0"),
        ("attempt", b"-3"),
        ("attempt", b"2.5"),
        ("attempt", b"99999999999999999999999"),
        ("progress", b"-0.5"),
        ("progress", b"1.5"),
        ("progress", b"1e300"),
        ("started_at", b"-1"),
        ("started_at", b"1e300"),
        ("finished_at", b"253402300800"),  # a second past year 9999
    ],
)
def test_a_number_out_of_its_range_reads_as_unknown(name: str, value: bytes) -> None:
    status = read_record("id", {b"state": b"running", name.encode(): value})
    assert status is not None
    assert getattr(status, name) is None


def test_numbers_in_range_are_read() -> None:
    status = read_record(
        "id",
        {
            b"state": b"failed",
            b"attempt": b"3",
            b"progress": b"1",
            b"started_at": b"0",
            b"finished_at": b"253402300799",
            b"error_type": b"ValueError",
        },
    )
    assert status is not None
    assert (status.attempt, status.progress, status.started_at) == (3, 1.0, 0.0)
    assert status.finished_at is not None
    assert datetime.datetime.fromtimestamp(status.finished_at, datetime.UTC).year == 9999
    assert status.error is not None
    assert status.error.type == "ValueError"


def test_a_due_time_that_is_not_a_time_reads_as_unknown() -> None:
    message = encode_message("t", None, enqueued_at=1.0, max_bytes=1000)
    for due in (float("inf"), -1.0, 1e300):
        status = status_of("id", look(due_ms=due, delayed=message))
        assert status.state is TaskState.SCHEDULED
        assert status.due_at is None


@pytest.mark.parametrize(
    "record",
    [
        {b"state": b"nonsense"},
        {b"state": b""},
        {b"state": b"\xff\xfe"},
        {b"progress": b"0.5"},  # progress, no state: a report of a task that kept nothing
        {b"result": b"1"},  # an outcome with no state
        {b"state": b"RUNNING"},
    ],
)
def test_a_partial_or_foreign_record_is_no_record(record: dict[bytes, bytes]) -> None:
    assert read_record("id", record) is None
    assert status_of("id", look(record)).state is TaskState.UNKNOWN


def test_a_record_of_a_finished_state_with_nothing_else_is_that_state() -> None:
    for state in ("succeeded", "failed", "dead", "cancelled", "expired"):
        status = status_of("id", look({b"state": state.encode()}))
        assert status.state is TaskState(state)
        assert status.error is None
        assert status.attempt is None


@pytest.mark.parametrize(
    "entry",
    [
        [],
        [b"payload"],
        [b"payload", b"not json"],
        [b"payload", b'{"task": 1}'],
        [b"odd", b"fields", b"count"],
    ],
)
def test_a_stream_entry_that_does_not_decode_still_gives_its_place(entry: list[bytes]) -> None:
    queued = status_of("1-0", look(entry_id="1-0", entry=entry))
    assert queued.state is TaskState.QUEUED
    assert queued.task is None
    running = status_of("1-0", look(entry_id="1-0", entry=entry, consumer="c", deliveries=3))
    assert running.state is TaskState.RUNNING
    assert running.instance == "c"
