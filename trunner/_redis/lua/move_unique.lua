-- Move due unique delayed tasks into the stream, each taking its lock as it enters: a task
-- whose lock is held then is dropped (not enqueued), and counted.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the delayed set
-- KEYS[3]  the delayed messages
-- KEYS[4]  the task stream (of the default lane: see move_due.lua)
-- KEYS[5]  the unique delayed tasks (task id -> its lock, see keys.UniqueLock)
-- KEYS[6]  where moved tasks are (hash: task id -> stream id)
-- KEYS[7]  the quarantine stream (a lock key holding something else is set aside, see
--          locks.lua)
-- KEYS[8..] the lock of each task (in ARGV order)
-- ARGV[2..] triples: task id, lock token, lock time-to-live (ms)
-- Returns  {moved, dropped}
-- Its keys' types are checked first (key_types.lua): a task taken out of the delayed set
-- but not added to the stream would be lost.
local refused = wrong_type({[KEYS[3]] = 'hash', [KEYS[4]] = 'stream', [KEYS[5]] = 'hash', [KEYS[6]] = 'hash'})
if refused then
  return refused
end
local moved, dropped = 0, 0
for i = 8, #KEYS do
  local j = 2 + 3 * (i - 8)
  local id = ARGV[j]
  if redis.call('ZREM', KEYS[2], id) == 1 then
    local message = redis.call('HGET', KEYS[3], id)
    if message and take_lock(KEYS[i], ARGV[j + 1], ARGV[j + 2], KEYS[7]) then
      local stream, suffix = message_lane(KEYS[4], message)
      redis.call('HSET', KEYS[6], id, redis.call('XADD', stream, '*', 'payload', message) .. suffix)
      moved = moved + 1
    else
      dropped = dropped + 1
    end
  end
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[5], id)
end
return {moved, dropped}
