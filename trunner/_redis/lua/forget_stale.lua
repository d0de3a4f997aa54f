-- The janitor forgets what outlived its use: cancel marks past their time (or not a
-- time at all), and where-map entries whose stream entry is gone (or that are not an
-- entry id). Each item is checked again here, so one that changed since it was read
-- stays.
-- KEYS[1]  the cancel marks (hash: task id -> until, ms)
-- KEYS[2]  where moved tasks are (hash: task id -> stream id)
-- KEYS[3]  the task stream (of the default lane: an entry id names its lane, lanes.lua)
-- ARGV[1]  now (ms since the epoch)
-- ARGV[2]  n, then n task ids of marks to check
-- then     m, then m task ids of where-map entries to check
-- Returns  {marks deleted, where-map entries deleted}
local now = tonumber(ARGV[1])
local at = 2
local marks, moved = 0, 0
local n = tonumber(ARGV[at])
for i = at + 1, at + n do
  local until_ms = redis.call('HGET', KEYS[1], ARGV[i])
  -- (not a time in ms of at most 19 digits, numbers.lua: the janitor records it)
  if until_ms and (checked_number(until_ms, {integer = true, min = 0, digits = 19}) or 0)
      <= now then
    marks = marks + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
at = at + n + 1
local m = tonumber(ARGV[at])
for i = at + 1, at + m do
  local entry = redis.call('HGET', KEYS[2], ARGV[i])
  if entry then
    local stream, stream_id = checked_entry(KEYS[3], entry)
    local ok, entries = true, {}
    if stream then -- a lane's key of another type: kept, until it is set aside
      ok, entries = pcall(redis.call, 'XRANGE', stream, stream_id, stream_id)
    end
    if not stream or (ok and #entries == 0) then
      moved = moved + redis.call('HDEL', KEYS[2], ARGV[i])
    end
  end
end
return {marks, moved}
