-- Enqueue unique tasks: each takes its lock and enters the stream atomically, or neither
-- happens (the lock is held: the task is refused). A lock never exists without its
-- message, and a failed enqueue never leaves a lock behind.
-- KEYS[1]  the task stream
-- KEYS[2]  the quarantine stream (a lock key holding something else is set aside, see
--          locks.lua)
-- KEYS[3..] one lock key per task (several tasks may share one; the first wins)
-- ARGV[1]  lock time-to-live (ms): unique_for
-- ARGV[2..] pairs: lock token, encoded message (in KEYS order)
-- Returns  per task: its new entry id, or false when refused
local kind = redis.call('TYPE', KEYS[1])
if type(kind) == 'table' then
  kind = kind['ok']
end
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind .. ', not a stream')
end
local ids = {}
for i = 3, #KEYS do
  local token = ARGV[2 * i - 4]
  if take_lock(KEYS[i], token, ARGV[1], KEYS[2]) then
    local id = redis.pcall('XADD', KEYS[1], '*', 'payload', ARGV[2 * i - 3])
    if type(id) == 'table' and id['err'] then
      redis.call('DEL', KEYS[i])
      return id
    end
    ids[i - 2] = id
  else
    ids[i - 2] = false
  end
end
return ids
