-- Schedule the next attempt of a failed message: acknowledge it and add the next attempt
-- to the delayed set, atomically (a crash can neither lose nor double it).
-- KEYS[1]  the task stream
-- KEYS[2]  the delayed set (task id scored by due time in ms)
-- KEYS[3]  the delayed messages (task id -> encoded message)
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entry
-- ARGV[3]  the entry id
-- ARGV[4]  due time of the next attempt (ms since the epoch)
-- ARGV[5]  the next attempt's encoded message
-- ARGV[6]  the task id
-- ARGV[7]  the wake-up channel, told when the retry became the earliest delayed task
-- Returns  1 when scheduled; 0 when the entry was no longer pending (nothing written)
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[3]) == 0 then
  return 0
end
if ARGV[2] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
redis.call('HSET', KEYS[3], ARGV[6], ARGV[5])
local first = redis.call('ZRANGE', KEYS[2], 0, 0)
if first[1] == ARGV[6] then
  redis.call('PUBLISH', ARGV[7], ARGV[4])
end
return 1
