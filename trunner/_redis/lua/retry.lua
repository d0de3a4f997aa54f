-- Schedule the next attempt of a failed message: acknowledge it and add the next attempt
-- to the delayed set, atomically (a crash can neither lose nor double it); forget where
-- the message was (the next one is recorded when it is moved); update the task's record
-- to 'retrying' if it keeps its result.
-- KEYS[1]  the task stream (of the entry's lane)
-- KEYS[2]  the group's delayed set of retries (task id scored by due time in ms)
-- KEYS[3]  its messages (task id -> encoded message)
-- KEYS[4]  where moved tasks are (hash: task id -> stream id)
-- KEYS[5]  the task's record (any key of the group when none is written)
-- KEYS[6]  the queue's registry of groups (a set): with more than one, nothing is deleted
-- KEYS[7..10] (S = 1) the concurrency slot the entry holds: its holders, its waiting
--          list, the quarantine stream and the stream of the default lane; the slot is
--          released and the oldest waiters granted (limits.lua)
-- then     (W = 1) the workflow of the step this message is (workflows.lua): the stream of
--          the default lane, the group's index of workflows, the quarantine stream, the
--          cancel marks, then the workflow's five keys, then the step's unique lock (any
--          key of the group when it holds none). A step of a workflow that no longer runs
--          (failing, cancelling, settled) is not scheduled again: it ends 'cancelled'
--          (absorbed by the workflow, as a nursery's cancelled child): its record says
--          'cancelled' (with the failure of its last attempt), its unique lock is released
--          (only the lock it took), and its waiters are told
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entry (unless the stream is shared)
-- ARGV[3]  the entry id
-- ARGV[4]  due time of the next attempt (ms since the epoch)
-- ARGV[5]  the next attempt's encoded message
-- ARGV[6]  the task id
-- ARGV[7]  the wake-up channel, told when the retry became the earliest delayed task
-- ARGV[8]  the record's time-to-live in ms ('0': no record is written)
-- ARGV[9]  the consumer the failed attempt's delivery is pending for
-- ARGV[10] that delivery's count: nothing is written unless it is still the pending one
--          (owns_delivery, deliveries.lua)
-- ARGV[11] S: '1' with a concurrency slot, '0' without
-- ARGV[12] W: '1' for a step of a workflow, '0' for a task of its own
-- ARGV[13..] field/value pairs of the record
-- then     (S = 1) the entry's id as trunner names it (its holder), the slot's limit
-- then     (W = 1) the workflow's id, the step's node, the cancel channel, the done
--          channel, how long a cancel mark holds (ms), the largest message a runner reads,
--          the unique lock's token ('' when there is no lock)
-- Returns  1 when scheduled; 0 when the attempt's delivery was no longer pending (nothing
--          written); 2 when the step's workflow no longer runs (acknowledged, not
--          scheduled: the step ended 'cancelled')
-- Its keys' types are checked first (key_types.lua): a message acknowledged but not
-- scheduled again would be lost.
local refused = wrong_type({[KEYS[2]] = 'zset', [KEYS[3]] = 'hash', [KEYS[4]] = 'hash'})
if refused then
  return refused
end
if not owns_delivery(KEYS[1], ARGV[1], ARGV[3], ARGV[9], ARGV[10]) then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
local known, groups = pcall(redis.call, 'SCARD', KEYS[6]) -- another type: shared
local shared = not known or groups > 1
if ARGV[2] == '1' and not shared then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
if ARGV[6] ~= ARGV[3] and not shared then
  redis.call('HDEL', KEYS[4], ARGV[6])
end
local slot, step = ARGV[11] == '1', ARGV[12] == '1'
local last = #ARGV - (step and 7 or 0)
if slot then
  release_slot(KEYS[7], KEYS[8], ARGV[last - 1], tonumber(ARGV[last]), KEYS[10], KEYS[4],
    KEYS[9])
  last = last - 2
end
local function write_record()
  if ARGV[8] ~= '0' then
    if not pcall(redis.call, 'HLEN', KEYS[5]) then -- not a hash (an outcome as one JSON
      redis.call('DEL', KEYS[5])                   -- string): the retry's record replaces it
    end
    redis.call('HSET', KEYS[5], unpack(ARGV, 13, last))
    redis.call('PEXPIRE', KEYS[5], ARGV[8])
  end
end
if step then
  local first, a = slot and 11 or 7, #ARGV - 6
  local k = wf_keys(KEYS, first + 4)
  local why = wf_usable(k)
  if not why and redis.call('HGET', k.wf, 'state') ~= 'running' then
    local ctx = wf_context(KEYS[first], KEYS[4], KEYS[first + 3], KEYS[first + 1],
      KEYS[first + 2], shared, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
    write_record()
    if ARGV[8] ~= '0' then
      redis.call('HSET', KEYS[5], 'state', 'cancelled') -- its last failure stays told
    end
    local token, locked, held = ARGV[a + 6], false, false
    if token ~= '' then
      locked, held = pcall(redis.call, 'GET', KEYS[first + 9]) -- another type: nobody's
    end
    if locked and held == token then
      redis.call('DEL', KEYS[first + 9])
    end
    wf_step_end(k, ARGV[a], tonumber(ARGV[a + 1]), 'cancelled', '', '', '', ctx)
    redis.call('PUBLISH', ctx.done_channel, ARGV[6]) -- the step's own waiters
    return 2
  end
end
write_record()
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
redis.call('HSET', KEYS[3], ARGV[6], ARGV[5])
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
if first[1] == ARGV[6] then
  redis.call('PUBLISH', ARGV[7], ARGV[4])
end
return 1
