-- Replay dead-lettered messages: each leaves the dead-letter stream and enters the task
-- stream again, atomically (a message replayed twice at once is enqueued once).
-- KEYS[1]  the dead-letter stream
-- KEYS[2]  the task stream
-- ARGV     pairs: dead-letter entry id, the message to enqueue (at most 500 pairs)
-- Returns  the new entry ids (false for entries no longer in the dead-letter stream)
local ids = {}
for i = 1, #ARGV, 2 do
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    ids[#ids + 1] = redis.call('XADD', KEYS[2], '*', 'payload', ARGV[i + 1])
  else
    ids[#ids + 1] = false
  end
end
return ids
