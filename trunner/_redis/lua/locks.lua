-- Unique locks, the first lines of the scripts that take one. A lock is a string with a
-- time-to-live; a lock key holding anything else (another type, or a string without a
-- time-to-live: written by something other than trunner) is nobody's lock, and would
-- block its key for ever: it is renamed aside (nothing is deleted), the quarantine stream
-- says so, and the lock is taken. A lock that is held is never touched.
-- take_lock(key, token, ttl ms, quarantine stream) -> true when taken
local function take_lock(key, token, ttl, quarantine)
  if redis.call('SET', key, token, 'PX', ttl, 'NX') then
    return true
  end
  local kind = redis.call('TYPE', key)
  if type(kind) == 'table' then
    kind = kind['ok']
  end
  if kind == 'string' and redis.call('PTTL', key) >= 0 then
    return false
  end
  local now = redis.call('TIME')
  local at = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  local to, n = key .. ':bad:' .. at, 0
  while redis.call('EXISTS', to) == 1 do
    n = n + 1
    to = key .. ':bad:' .. at .. '.' .. n
  end
  redis.call('RENAME', key, to)
  local why = kind == 'string' and 'a string without a time-to-live' or ('a ' .. kind)
  -- best effort: a quarantine stream of the wrong type is set aside by the runners' loops
  redis.pcall('XADD', quarantine, 'MAXLEN', '~', 10000, '*', 'source', 'unique', 'item', key,
    'reason', why .. ', not a unique lock', 'action', 'renamed to ' .. to, 'value', '',
    'instance', '', 'at', at)
  return redis.call('SET', key, token, 'PX', ttl, 'NX') ~= false
end
