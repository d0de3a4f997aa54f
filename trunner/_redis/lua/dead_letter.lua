-- Give up on a message: acknowledge it and copy it to the dead-letter stream, atomically;
-- release its unique lock if it holds one; write its outcome if it keeps its result;
-- forget where it was and its cancel mark; tell the waiters it finished.
-- KEYS[1]  the task stream (of the entry's lane)
-- KEYS[2]  the dead-letter stream
-- KEYS[3]  where moved tasks are (hash: task id -> stream id)
-- KEYS[4]  the cancel marks (hash: task id -> until, ms)
-- KEYS[5]  the task's record ('' -> none is written; pass any key of the group)
-- KEYS[6]  the queue's registry of groups (a set): with more than one group reading the
--          stream, the entry is not deleted, nor the task's cancel mark (another group
--          may not have read it yet)
-- KEYS[7]  the message's unique lock (any key of the group when it holds none)
-- KEYS[8..11] (S = 1) the concurrency slot the entry holds: its holders, its waiting list,
--          the quarantine stream and the stream of the default lane; the slot is
--          released and the oldest waiters granted (limits.lua)
-- then     (W = 1) the workflow of the step this message is (workflows.lua): the stream of
--          the default lane, the group's index of workflows, the quarantine stream, the
--          cancel marks, then the workflow's five keys (wf, plan, marks, res, err); the step ends 'failed'
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entry (unless the stream is shared)
-- ARGV[3]  the entry id
-- ARGV[4]  approximate cap of the dead-letter stream ('0': no cap)
-- ARGV[5]  the unique lock's token ('' when there is no lock)
-- ARGV[6]  the task id
-- ARGV[7]  the channel of finished tasks ('' to say nothing)
-- ARGV[8]  the record's time-to-live in ms ('0': no record is written)
-- ARGV[9]  the consumer the attempt's delivery is pending for
-- ARGV[10] that delivery's count: nothing is written unless it is still the pending one
--          (owns_delivery, deliveries.lua)
-- ARGV[11] S: '1' with a concurrency slot, '0' without
-- ARGV[12] W: '1' for a step of a workflow, '0' for a task of its own
-- ARGV[13] F, then F field/value pairs of the record
-- then     the field/value pairs of the dead-letter entry
-- then     (S = 1) the entry's id as trunner names it (its holder), the slot's limit
-- then     (W = 1) the workflow's id, the step's node, its successors, its failure JSON,
--          the cancel channel, the done channel, how long a cancel mark holds (ms), the
--          largest message a runner reads
-- Returns  the dead-letter entry id; false when the attempt's delivery was no longer
--          pending (nothing written)
-- Its keys' types are checked first (key_types.lua): a message acknowledged but not dead-
-- lettered would be lost.
local refused = wrong_type({[KEYS[2]] = 'stream', [KEYS[3]] = 'hash', [KEYS[4]] = 'hash'})
if refused then
  return refused
end
if not owns_delivery(KEYS[1], ARGV[1], ARGV[3], ARGV[9], ARGV[10]) then
  return false
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
local known, groups = pcall(redis.call, 'SCARD', KEYS[6]) -- another type: shared
local shared = not known or groups > 1
if ARGV[2] == '1' and not shared then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
local locked, held = pcall(redis.call, 'GET', KEYS[7]) -- another type: nobody's lock
if locked and held == ARGV[5] and ARGV[5] ~= '' then
  redis.call('DEL', KEYS[7])
end
if not shared then -- else another group may not have read it: these expire, or go
  if ARGV[6] ~= ARGV[3] then -- with the entry
    redis.call('HDEL', KEYS[3], ARGV[6])
  end
  redis.call('HDEL', KEYS[4], ARGV[6])
end
local slot, step = ARGV[11] == '1', ARGV[12] == '1'
local last = #ARGV - (step and 8 or 0)
if slot then
  release_slot(KEYS[8], KEYS[9], ARGV[last - 1], tonumber(ARGV[last]), KEYS[11], KEYS[3],
    KEYS[10])
  last = last - 2
end
local fields = tonumber(ARGV[13])
local after = 14 + 2 * fields
if ARGV[8] ~= '0' then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], unpack(ARGV, 14, after - 1))
  redis.call('PEXPIRE', KEYS[5], ARGV[8])
end
local id
if ARGV[4] == '0' then
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, after, last))
else
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, after, last))
end
if step then
  local first, a = slot and 12 or 8, #ARGV - 7
  local ctx = wf_context(KEYS[first], KEYS[3], KEYS[first + 3], KEYS[first + 1],
    KEYS[first + 2], shared, ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7])
  wf_step_end(wf_keys(KEYS, first + 4), ARGV[a], tonumber(ARGV[a + 1]), 'failed',
    ARGV[a + 2], '', ARGV[a + 3], ctx)
end
if ARGV[7] ~= '' then
  redis.call('PUBLISH', ARGV[7], ARGV[6])
end
return id
