-- Take the metrics of the window that ends now and reset them: the leader's aggregation.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id: only the current
-- leader may reset.)
-- KEYS[2]  the metrics hash
-- KEYS[3]  the live instances
-- KEYS[4]  the instances' details
-- ARGV[2]  instances last seen before this (ms) are dropped as dead
-- ARGV[3]  the most dead instances to drop in this call
-- Returns  the metrics hash as a flat field/value list (empty when nothing was recorded)
local metrics = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for i = 1, #dead do
  redis.call('ZREM', KEYS[3], dead[i])
  redis.call('HDEL', KEYS[4], dead[i])
end
return metrics
