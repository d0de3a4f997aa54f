-- Schedule a delayed task: it enters the stream when due (moved by the leader).
-- KEYS[1]  the delayed set (task id scored by due time in ms)
-- KEYS[2]  the delayed messages (task id -> encoded message)
-- KEYS[3]  the unique delayed tasks (task id -> its lock, see keys.UniqueLock)
-- ARGV[1]  the task id
-- ARGV[2]  due time (ms since the epoch)
-- ARGV[3]  the encoded message
-- ARGV[4]  the wake-up channel, told when this task became the earliest one
-- ARGV[5]  for a unique task: its lock as UniqueLock.encode() writes it, the JSON array
--          ["<lock key>", "<token>", <ttl ms>]; otherwise ''
-- Returns  1 when added, 0 when a task of this id was already scheduled (now replaced)
-- Its keys' types are checked first (key_types.lua): a task in the delayed set without
-- its message would be lost.
local wanted = {[KEYS[1]] = 'zset', [KEYS[2]] = 'hash'}
if ARGV[5] ~= '' then
  wanted[KEYS[3]] = 'hash'
end
local refused = wrong_type(wanted)
if refused then
  return refused
end
local added = redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if first[1] == ARGV[1] then
  redis.call('PUBLISH', ARGV[4], ARGV[2])
end
return added
