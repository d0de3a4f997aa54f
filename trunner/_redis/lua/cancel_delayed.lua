-- Cancel a delayed task that is not due yet (or not yet moved into the stream).
-- KEYS[1]  the delayed set
-- KEYS[2]  the delayed messages
-- KEYS[3]  the unique delayed tasks
-- KEYS[4]  (optional) the unique lock a scheduled retry holds
-- ARGV[1]  the task id
-- ARGV[2]  that lock's token ('' without a lock)
-- Returns  1 when it was found and removed, 0 otherwise
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local locked, held = false, false
if removed == 1 and KEYS[4] then
  locked, held = pcall(redis.call, 'GET', KEYS[4]) -- another type: nobody's lock
end
if locked and held == ARGV[2] then
  redis.call('DEL', KEYS[4])
end
return removed
