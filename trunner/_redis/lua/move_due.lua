-- Move delayed messages that are due into the task stream.
-- KEYS[1]  the delayed set (scored by due time in ms)
-- KEYS[2]  the task stream
-- ARGV[1]  now (ms since the epoch)
-- ARGV[2]  the most entries to move in this call
-- Returns  {moved, due time of the earliest entry left (string) or false}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for i = 1, #due do
  redis.call('XADD', KEYS[2], '*', 'payload', due[i])
  redis.call('ZREM', KEYS[1], due[i])
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, nxt[2] or false}
