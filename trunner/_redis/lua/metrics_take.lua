-- Take the metrics of the window that ends now and reset them: the leader's aggregation.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id: only the current
-- leader may reset.)
-- KEYS[2]  the metrics hash
-- KEYS[3]  the live instances
-- KEYS[4]  the instances' details
-- ARGV[2]  instances last seen before this (ms) are dropped as dead
-- ARGV[3]  the most dead instances to drop in this call
-- ARGV[4]  instances last seen after this (ms) are dropped too: no running instance
--          writes such a time (something else did), and it would be listed for ever
-- Returns  {the metrics hash as a flat field/value list (empty when nothing was
--          recorded), a flat list of the instances dropped for their time and that time}
local metrics = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for i = 1, #dead do
  redis.call('ZREM', KEYS[3], dead[i])
  redis.call('HDEL', KEYS[4], dead[i])
end
local ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[4], '+inf', 'WITHSCORES', 'LIMIT', 0, ARGV[3])
for i = 1, #ahead, 2 do
  redis.call('ZREM', KEYS[3], ahead[i])
  redis.call('HDEL', KEYS[4], ahead[i])
end
return {metrics, ahead}
