-- Fire one tick of a cron schedule, at most once group-wide: the leader's cron.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the cron hash (schedule name -> last tick fired, ms)
-- KEYS[3]  the task stream (of the default lane: the message may name another, lanes.lua)
-- KEYS[4]  where moved tasks are (hash: task id -> stream id)
-- KEYS[5]  the quarantine stream (a lock key holding something else is set aside, see
--          locks.lua)
-- KEYS[6]  (optional) the lock of a unique task: the tick is skipped while it is held
-- ARGV[2]  the schedule's name
-- ARGV[3]  the tick (ms since the epoch)
-- ARGV[4]  the encoded message
-- ARGV[5]  the tick's task id
-- ARGV[6]  (with a lock) its token
-- ARGV[7]  (with a lock) its time-to-live (ms)
-- Returns  1 when fired, 0 when this tick (or a later one) was already fired, -1 when the
--          task's key is locked (the previous run is not finished): the tick is skipped
-- A stored value trunner cannot have written (not a time in ms of at most 15 digits, read
-- by checked_number, numbers.lua; or more than a day after this tick) counts as no tick
-- fired: this tick fires and replaces it (the cron loop records it). (tonumber alone took
-- '1e400' for infinity: the schedule never fired again.)
-- Its keys' types are checked first (key_types.lua): a tick marked fired but not enqueued
-- would be lost.
local refused = wrong_type({[KEYS[2]] = 'hash', [KEYS[3]] = 'stream', [KEYS[4]] = 'hash'})
if refused then
  return refused
end
local stored = redis.call('HGET', KEYS[2], ARGV[2])
local last = stored and checked_number(stored, {integer = true, min = 0, digits = 15}) or 0
if last > tonumber(ARGV[3]) + 86400000 then
  last = 0
end
if last >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if KEYS[6] and not take_lock(KEYS[6], ARGV[6], ARGV[7], KEYS[5]) then
  return -1
end
local stream, suffix = message_lane(KEYS[3], ARGV[4])
redis.call('HSET', KEYS[4], ARGV[5], redis.call('XADD', stream, '*', 'payload', ARGV[4]) .. suffix)
return 1
