-- Set aside keys of the group that hold a value of the wrong type (written by something
-- other than trunner): each is renamed, nothing is deleted, and a record in the
-- quarantine stream says what was done.
-- KEYS[1]  the quarantine stream
-- KEYS[2]  the name to rename the quarantine stream to, if it is not a stream
-- KEYS[3..] pairs: a key, the name to rename it to when its type is wrong
-- ARGV[1]  approximate cap of the quarantine stream
-- ARGV[2]  this instance's id
-- ARGV[3]  now (ms since the epoch)
-- ARGV[4..] the type each key of KEYS[3..] pairs must have, in order
-- Returns  a flat list: each key set aside, the type it had, the name it has now
local function kind(key)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then
    t = t['ok']
  end
  return t
end
local aside = {}
local function set_aside(key, had, to)
  redis.call('RENAME', key, to)
  aside[#aside + 1] = key
  aside[#aside + 1] = had
  aside[#aside + 1] = to
end
local q = kind(KEYS[1])
if q ~= 'stream' and q ~= 'none' then
  set_aside(KEYS[1], q, KEYS[2])
end
for i = 3, #KEYS, 2 do
  local want = ARGV[4 + (i - 3) / 2]
  local had = kind(KEYS[i])
  if had ~= want and had ~= 'none' then
    set_aside(KEYS[i], had, KEYS[i + 1])
  end
end
for i = 1, #aside, 3 do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
    'source', aside[i], 'item', aside[i], 'reason', 'a ' .. aside[i + 1] .. ', not what trunner writes there',
    'action', 'renamed to ' .. aside[i + 2], 'value', '', 'instance', ARGV[2], 'at', ARGV[3])
end
return aside
