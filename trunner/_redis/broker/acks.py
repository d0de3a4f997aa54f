"""The ends of an attempt: acknowledged, retried or dead-lettered, each written only while
the attempt's delivery is still the entry's pending one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ..._wire.names import lane_suffix, split_entry_id
from ..transports.base import Arg
from ..transports.resp import as_str, packed_fields, text_field
from ._base import AckRecord, Delivery, Record, Slot, chunks, lane_stream_ids, same_id
from .workflows import StepEnd, Workflows

__all__ = ["Acks"]


def _by_consumer(
    ids: Sequence[str], owners: Mapping[str, Delivery]
) -> Iterable[tuple[str, Sequence[str]]]:
    """``ids`` in script-sized chunks, each of one consumer's deliveries (in order)."""
    consumer = owners[ids[0]].consumer if ids else ""
    if all(owners[i].consumer == consumer for i in ids):  # the usual case: one consumer
        for chunk in chunks(ids):
            yield consumer, chunk
        return
    grouped: dict[str, list[str]] = {}
    for i in ids:
        grouped.setdefault(owners[i].consumer, []).append(i)
    for name, its_ids in grouped.items():
        for chunk in chunks(its_ids):
            yield name, chunk


class Acks(Workflows):
    """Ending attempts, each in one script that checks the attempt's delivery (and ends the
    step of a workflow an attempt was, in the same script)."""

    async def ack(
        self,
        ids: Sequence[str],
        locks: Mapping[str, tuple[str, str]] | None = None,
        moved: Mapping[str, str] | None = None,
        records: Mapping[str, AckRecord] | None = None,
        forget: Mapping[str, str] | None = None,
        slots: Mapping[str, Slot] | None = None,
        steps: Mapping[str, StepEnd] | None = None,
        *,
        owners: Mapping[str, Delivery],
    ) -> tuple[int, list[str]]:
        """Acknowledge ``ids`` and tell the waiters of their tasks, in one script per 1000;
        return how many were acknowledged, and the ids whose delivery was no longer the
        ending attempt's (``owners[id]``): nothing was written for those.

        Per id, where given: ``locks[id] = (lock key, token)`` is released; ``moved[id]``
        is the task id of a message whose id is not its task's (the where-map forgets
        it, and the waiters hear of the task id); ``records[id]`` is the outcome of a task
        that keeps its result, written with the acknowledgement; ``forget[id]`` is a
        cancelled task id whose cancel mark goes; ``slots[id]`` is the concurrency slot
        it holds, released (and granted to the oldest waiter) with the acknowledgement;
        ``steps[id]`` is the end of the workflow step it was, recorded with it (the
        successors whose last input it was start in the same call).
        """
        acked, lost = 0, list[str]()
        for lane, lane_ids in self._by_lane(ids, same_id):
            suffix = lane_suffix(lane)
            for consumer, chunk in _by_consumer(lane_ids, owners):
                done, refused = await self._ack_lane(
                    lane, consumer, chunk, owners, locks, moved, records, forget, slots, steps
                )
                acked += done
                lost += (as_str(i) + suffix for i in refused)
        return acked, lost

    async def _ack_lane(
        self,
        lane: str,
        consumer: str,
        chunk: Sequence[str],
        owners: Mapping[str, Delivery],
        locks: Mapping[str, tuple[str, str]] | None,
        moved: Mapping[str, str] | None,
        records: Mapping[str, AckRecord] | None,
        forget: Mapping[str, str] | None,
        slots: Mapping[str, Slot] | None,
        steps: Mapping[str, StepEnd] | None,
    ) -> tuple[int, list[Any]]:
        """One script call: ``chunk`` (at most 1000 ids of ``lane``, pending for
        ``consumer``)."""
        keys = self.keys
        stream_ids = lane_stream_ids(lane, chunk)
        held = [(n, locks[i]) for n, i in enumerate(chunk, 1) if i in locks] if locks else []
        outcomes = (
            [(n, records[i]) for n, i in enumerate(chunk, 1) if i in records] if records else []
        )
        args: list[Arg] = [self.group, self._delete, keys.done, lane_suffix(lane), consumer]
        args.append(len(chunk))
        for stream_id, i in zip(stream_ids, chunk, strict=True):
            args += [stream_id, owners[i].delivery_count]
        args.append(len(held))
        for n, (_, token) in held:
            args += [n, token]
        pairs = [(n, moved[i]) for n, i in enumerate(chunk, 1) if i in moved] if moved else []
        args += [len(pairs), *(x for pair in pairs for x in pair)]
        gone = [(n, forget[i]) for n, i in enumerate(chunk, 1) if i in forget] if forget else []
        args += [len(gone), *(x for pair in gone for x in pair)]
        args.append(len(outcomes))
        for n, (_, ttl_ms, fields) in outcomes:
            args.append(n)
            if isinstance(fields, bytes):  # a JSON object: stored as it is
                args += [fields, ttl_ms]
                continue
            packed = packed_fields(fields, ttl_ms) if fields else None
            if packed is not None:
                args.append(packed)
            else:
                args += [ttl_ms, len(fields), *(text_field(x) for pair in fields for x in pair)]
        held_slots = (
            [(n, i, slots[i]) for n, i in enumerate(chunk, 1) if i in slots] if slots else []
        )
        ended = [(n, steps[i]) for n, i in enumerate(chunk, 1) if i in steps] if steps else []
        slot_keys: list[str] = []
        if held_slots or ended:
            args.append(len(held_slots))
            for n, i, (holders, waiting, limit) in held_slots:
                slot_keys += [holders, waiting]
                args += [n, i, limit]
            if held_slots:
                slot_keys += [keys.quarantine, keys.stream]
        if ended:
            flow_keys, flow_args = self._steps_section(ended)
            slot_keys += flow_keys
            args += flow_args
        reply = await self._script(
            "ack",
            [
                keys.lane_stream(lane),
                keys.where,
                keys.cancelled,
                *(key for _, (key, _) in held),
                *(key for _, (key, _, _) in outcomes),
                *slot_keys,
                keys.groups,
            ],
            args,
        )
        return int(reply[0]), list(reply[1] or ())

    async def retry(
        self,
        message_id: str,
        task_id: str,
        due_ms: int,
        data: bytes,
        record: Record | None = None,
        slot: Slot | None = None,
        step: StepEnd | None = None,
        *,
        owner: Delivery,
        lock: tuple[str, str] | None = None,
    ) -> bool | Literal["cancelled"]:
        """Acknowledge a failed message and schedule its next attempt, atomically; update
        the ``record`` of a task that keeps its result (state 'retrying'); release the
        concurrency ``slot`` it holds. False, and nothing written, when the attempt's
        delivery (``owner``) is no longer the pending one. For the ``step`` of a workflow
        that no longer runs, ``"cancelled"``: acknowledged, not scheduled, the step ended
        'cancelled' and its record says so (``step.kind`` is not read), its unique ``lock``
        (key, token: a retry keeps it otherwise) released."""
        keys = self.keys
        lane, stream_id = split_entry_id(message_id)
        ttl, fields = (record[1], record[2]) if record else (0, [])
        flow_keys: list[str] = []
        flow_args: list[Arg] = []
        if step is not None:
            flow_keys, flow_args = self._step_tail(step, with_next=False)
            flow_keys.append(lock[0] if lock else keys.stream)
            flow_args.append(lock[1] if lock else "")
        reply = await self._script(
            "retry",
            [
                keys.lane_stream(lane),
                keys.retries,
                keys.retry_messages,
                keys.where,
                record[0] if record else keys.stream,
                keys.groups,
                *((slot[0], slot[1], keys.quarantine, keys.stream) if slot else ()),
                *flow_keys,
            ],
            [
                self.group,
                self._delete,
                stream_id,
                due_ms,
                data,
                task_id,
                keys.delayed_wake,
                ttl,
                owner.consumer,
                owner.delivery_count,
                int(slot is not None),
                int(step is not None),
                *(text_field(x) for pair in fields for x in pair),
                *((message_id, slot[2]) if slot else ()),
                *flow_args,
            ],
        )
        return "cancelled" if reply == 2 else bool(reply)

    async def dead_letter(
        self,
        message_id: str,
        fields: Sequence[tuple[str, Arg]],
        maxlen: int | None,
        lock: tuple[str, str] | None = None,
        task_id: str | None = None,
        record: Record | None = None,
        slot: Slot | None = None,
        step: StepEnd | None = None,
        *,
        owner: Delivery,
    ) -> str | None:
        """Acknowledge and copy to the dead-letter stream; release ``lock`` (key, token);
        write the ``record`` of a task that keeps its result; tell the task's waiters;
        release the concurrency ``slot`` it holds; end the workflow ``step`` it was, failed
        (``step.kind`` is not read). None, and nothing written, when the attempt's delivery
        (``owner``) is no longer the pending one.

        A field's text that cannot be sent as it is (a lone surrogate, in an error message
        say) is written with backslash escapes: the write never fails on it."""
        keys = self.keys
        lane, stream_id = split_entry_id(message_id)
        flat: list[Any] = [text_field(x) for pair in fields for x in pair]
        ttl, outcome = (record[1], record[2]) if record else (0, [])
        flow_keys, flow_args = self._step_tail(step, with_next=True) if step else ([], [])
        reply = await self._script(
            "dead_letter",
            [
                keys.lane_stream(lane),
                keys.dead,
                keys.where,
                keys.cancelled,
                record[0] if record else keys.stream,
                keys.groups,
                lock[0] if lock else keys.stream,
                *((slot[0], slot[1], keys.quarantine, keys.stream) if slot else ()),
                *flow_keys,
            ],
            [
                self.group,
                self._delete,
                stream_id,
                maxlen or 0,
                lock[1] if lock else "",
                task_id or message_id,
                keys.done,
                ttl,
                owner.consumer,
                owner.delivery_count,
                int(slot is not None),
                int(step is not None),
                len(outcome),
                *(text_field(x) for pair in outcome for x in pair),
                *flat,
                *((message_id, slot[2]) if slot else ()),
                *flow_args,
            ],
        )
        return as_str(reply) if reply else None
