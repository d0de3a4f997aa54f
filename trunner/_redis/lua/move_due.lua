-- Move delayed tasks that are due into the task stream: the leader's scheduler.
-- Unique tasks are not moved here (their locks must be named in KEYS): they are returned,
-- for move_unique.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the delayed set (task id scored by due time in ms)
-- KEYS[3]  the delayed messages (task id -> encoded message)
-- KEYS[4]  the task stream (of the default lane: a message naming a lane enters that
--          lane's stream, lanes.lua)
-- KEYS[5]  the unique delayed tasks (task id -> its lock, see keys.UniqueLock)
-- KEYS[6]  where moved tasks are (hash: task id -> stream id)
-- ARGV[2]  now (ms since the epoch)
-- ARGV[3]  the most tasks to look at in this call
-- Returns  {moved, due time of the earliest task left (string) or false, {unique due ids}}
-- Its keys' types are checked first (key_types.lua): a task added to the stream but left
-- in the delayed set would run again at every pass.
local refused = wrong_type({[KEYS[3]] = 'hash', [KEYS[4]] = 'stream', [KEYS[5]] = 'hash', [KEYS[6]] = 'hash'})
if refused then
  return refused
end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])
local moved = 0
local unique = {}
for i = 1, #due do
  if redis.call('HEXISTS', KEYS[5], due[i]) == 1 then
    unique[#unique + 1] = due[i]
  else
    local message = redis.call('HGET', KEYS[3], due[i])
    if message then
      local stream, suffix = message_lane(KEYS[4], message)
      redis.call('HSET', KEYS[6], due[i], redis.call('XADD', stream, '*', 'payload', message) .. suffix)
      moved = moved + 1
    end
    redis.call('ZREM', KEYS[2], due[i])
    redis.call('HDEL', KEYS[3], due[i])
  end
end
local nxt = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {moved, nxt[2] or false, unique}
