-- Cancel a delayed task that is not due yet (or not yet moved into the stream).
-- KEYS[1]  the delayed set
-- KEYS[2]  the delayed messages
-- KEYS[3]  the unique delayed tasks
-- ARGV[1]  the task id
-- Returns  1 when it was found and removed, 0 otherwise
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
