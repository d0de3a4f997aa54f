-- Publish the per-instance capacity the leader decided, and the window's statistics.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the capacity hash (value, fence, version)
-- KEYS[3]  the latest statistics (JSON)
-- ARGV[2]  the capacity (workers per instance; '' to leave it unchanged)
-- ARGV[3]  the leader's fence number
-- ARGV[4]  the statistics (JSON)
-- Returns  the capacity version now published
redis.call('SET', KEYS[3], ARGV[4])
if ARGV[2] == '' then
  return redis.call('HGET', KEYS[2], 'version') or 0
end
if redis.call('HGET', KEYS[2], 'value') ~= ARGV[2] then
  redis.call('HSET', KEYS[2], 'value', ARGV[2], 'fence', ARGV[3])
  return redis.call('HINCRBY', KEYS[2], 'version', 1)
end
return redis.call('HGET', KEYS[2], 'version')
