-- An instance's report, once a second: add its timing samples to the group's metrics,
-- refresh its membership, and read the capacity the leader decided. One round trip.
-- KEYS[1]  the metrics hash (field -> running total, since the last reset)
-- KEYS[2]  the live instances (id scored by last-seen ms)
-- KEYS[3]  the instances' details (id -> JSON)
-- KEYS[4]  the capacity the leader decided (hash: value, fence, version)
-- ARGV[1]  this instance's id
-- ARGV[2]  now (ms)
-- ARGV[3]  this instance's details (JSON)
-- ARGV[4..] field/increment pairs for the metrics hash (at most 1000 fields)
-- Returns  {capacity value or false, capacity version or false}
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
if #ARGV > 3 then
  redis.call('HSETNX', KEYS[1], 'since', ARGV[2])
  for i = 4, #ARGV, 2 do
    redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return redis.call('HMGET', KEYS[4], 'value', 'version')
