-- Fire one tick of a cron schedule, at most once group-wide: the leader's cron.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the cron hash (schedule name -> last tick fired, ms)
-- KEYS[3]  the task stream
-- KEYS[4]  (optional) the lock of a unique task: the tick is skipped while it is held
-- ARGV[2]  the schedule's name
-- ARGV[3]  the tick (ms since the epoch)
-- ARGV[4]  the encoded message
-- ARGV[5]  (with a lock) its token
-- ARGV[6]  (with a lock) its time-to-live (ms)
-- Returns  1 when fired, 0 when this tick (or a later one) was already fired, -1 when the
--          task's key is locked (the previous run is not finished): the tick is skipped
-- (a value that is not a number, written by something else, counts as no tick fired)
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[2])) or 0
if last >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if KEYS[4] and not redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6], 'NX') then
  return -1
end
redis.call('XADD', KEYS[3], '*', 'payload', ARGV[4])
return 1
