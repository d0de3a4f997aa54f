-- Enqueue several task messages in one call.
-- KEYS[1]  the task stream
-- ARGV     the encoded messages (the caller sends at most 1000 per call)
-- Returns  the new entry ids, in ARGV order
local ids = {}
for i = 1, #ARGV do
  ids[i] = redis.call('XADD', KEYS[1], '*', 'payload', ARGV[i])
end
return ids
