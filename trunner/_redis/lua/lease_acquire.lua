-- Take the leadership lease if nobody holds it; on success, draw the next fence number.
-- A lease or a fence counter that trunner cannot have written (a lease that is not a
-- string, or a string that never expires; a counter that is not an integer, or below 0)
-- is renamed aside: one bad value must not keep every candidate from leading for ever.
-- KEYS[1]  the lease key
-- KEYS[2]  the fence counter (same hash slot as the lease)
-- KEYS[3]  the name a bad lease is renamed to
-- KEYS[4]  the name a bad fence counter is renamed to
-- ARGV[1]  this instance's id
-- ARGV[2]  lease time-to-live (ms)
-- Returns  {fence, repaired}: the new fence number (> 0) when acquired, 0 when someone
--          else holds the lease; what was renamed aside, and why ('' when nothing)
local function kind(key)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then
    t = t['ok']
  end
  return t
end
local repaired = {}
local lease = kind(KEYS[1])
if lease ~= 'none' and lease ~= 'string' then
  redis.call('RENAME', KEYS[1], KEYS[3])
  repaired[#repaired + 1] = 'the lease was a ' .. lease .. ', renamed to ' .. KEYS[3]
elseif lease == 'string' and redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('RENAME', KEYS[1], KEYS[3])
  repaired[#repaired + 1] = 'the lease never expired, renamed to ' .. KEYS[3]
end
if not redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  return {0, table.concat(repaired, '; ')}
end
local fence = redis.pcall('INCR', KEYS[2])
-- (a counter trunner wrote is never below 1: a negative one would give no fence, 0, or
-- fences below those already given)
if type(fence) == 'table' and fence['err'] or fence < 1 then
  -- Renamed aside; the counter goes on above any number it can have given: the server's
  -- clock in ms (fences are drawn one per promotion, far fewer than one per ms).
  redis.call('RENAME', KEYS[2], KEYS[4])
  local now = redis.call('TIME')
  fence = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('SET', KEYS[2], fence)
  repaired[#repaired + 1] = 'the fence counter was not a positive integer, renamed to ' .. KEYS[4]
end
return {fence, table.concat(repaired, '; ')}
