-- Resume the group: its runners fetch again at once. Deletes the pause mark (whatever it
-- holds) and sends the resume notice on the cancel channel. Idempotent: resuming a group
-- that runs changes nothing, and sends the notice again.
-- KEYS[1]  the pause mark
-- ARGV[1]  the cancel channel, which carries the group's notices
-- ARGV[2]  the resume notice
-- Returns  1 if the group was paused (a mark the runners read as paused: 1 to 20 decimal
--          digits, see _wire/pause.py: decode_mark), else 0
local ok, held = pcall(redis.call, 'GET', KEYS[1])
local was = 0
if ok and held and #held <= 20 and string.match(held, '^%d+$') then
  was = 1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return was
