-- Pause the group: its runners stop fetching (running tasks go on). The mark is durable (a
-- runner started later reads it); the notice on the cancel channel makes every runner
-- stop at once. Idempotent: a group paused already keeps its mark (and the time it was
-- paused), and the notice is sent again (a runner that missed the first one hears it).
-- KEYS[1]  the pause mark (string: when the group was paused, ms since the epoch)
-- ARGV[1]  now (ms since the epoch)
-- ARGV[2]  the cancel channel, which carries the group's notices
-- ARGV[3]  the pause notice
-- Returns  {1 if this call paused the group (0 if it was paused already), the mark}
-- What something else wrote there (another type, or not 1 to 20 decimal digits: see
-- _wire/pause.py: decode_mark) never fails it: it is replaced, as the runners read it as "not
-- paused".
local ok, held = pcall(redis.call, 'GET', KEYS[1])
local changed = 0
if not (ok and held and #held <= 20 and string.match(held, '^%d+$')) then
  redis.call('SET', KEYS[1], ARGV[1])
  held = ARGV[1]
  changed = 1
end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {changed, held}
