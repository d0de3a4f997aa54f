-- Replay dead-lettered messages: each leaves the dead-letter stream and enters the task
-- stream again, atomically (a message replayed twice at once is enqueued once). A message
-- of a unique task takes its lock as it enters, as a dispatch does: if the lock is held
-- (a task of that key is queued or running), the message is not replayed and stays in the
-- dead-letter stream.
-- KEYS[1]  the dead-letter stream
-- KEYS[2]  the task stream (of the default lane: a message enters the lane it names,
--          lanes.lua)
-- KEYS[3]  where moved tasks are (hash: task id -> stream id)
-- KEYS[4]  the quarantine stream (a lock key holding something else is set aside, see
--          locks.lua)
-- KEYS[5..] the locks of the unique messages, one per message that has one, in ARGV order
-- ARGV     quintuples (at most 500): dead-letter entry id, the message to enqueue, its
--          lock token ('' when it has no lock), the lock time-to-live in ms ('0' idem),
--          the message's task id
-- Returns  per message: its new entry id; false when the entry is no longer in the
--          dead-letter stream; 0 when its lock is held (the entry stays)
-- Its keys' types are checked first (key_types.lua): an entry taken out of the
-- dead-letter stream but not added to the task stream would be lost.
local refused = wrong_type({[KEYS[1]] = 'stream', [KEYS[2]] = 'stream', [KEYS[3]] = 'hash'})
if refused then
  return refused
end
local results = {}
local lock = 4
for i = 1, #ARGV, 5 do
  local id, message, token, ttl, task_id = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local result
  if #redis.call('XRANGE', KEYS[1], id, id) == 0 then
    result = false
  else
    local free = true
    if token ~= '' then
      lock = lock + 1
      free = take_lock(KEYS[lock], token, ttl, KEYS[4])
    end
    if free then
      redis.call('XDEL', KEYS[1], id)
      local stream, suffix = message_lane(KEYS[2], message)
      result = redis.call('XADD', stream, '*', 'payload', message) .. suffix
      redis.call('HSET', KEYS[3], task_id, result)
    else
      result = 0
    end
  end
  results[#results + 1] = result
end
return results
