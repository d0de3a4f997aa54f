-- Publish the per-instance capacity the leader decided, and the window's statistics.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the capacity hash (value, fence, version)
-- KEYS[3]  the latest statistics (JSON)
-- ARGV[2]  the capacity (workers per instance; '' to leave it unchanged)
-- ARGV[3]  the leader's fence number
-- ARGV[4]  the statistics (JSON)
-- Returns  the capacity version now published (0: none)
redis.call('SET', KEYS[3], ARGV[4])
local stored = redis.call('HGET', KEYS[2], 'version')
local version = stored and checked_number(stored, {integer = true, min = 0, digits = 15})
if stored and not version then
  -- Not a count trunner wrote (something else did; the instances record what they read):
  -- the decision is published again, its version counted from 1.
  redis.call('HDEL', KEYS[2], 'value', 'version')
  version = false
end
if ARGV[2] == '' then
  return version or 0
end
if redis.call('HGET', KEYS[2], 'value') ~= ARGV[2] then
  redis.call('HSET', KEYS[2], 'value', ARGV[2], 'fence', ARGV[3])
  return redis.call('HINCRBY', KEYS[2], 'version', 1)
end
return version
