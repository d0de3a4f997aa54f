-- An instance leaves the group gracefully: it drops out of the live instances at once.
-- KEYS[1]  the live instances
-- KEYS[2]  the instances' details
-- ARGV[1]  the instance's id
-- Returns  1 when it was registered
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
