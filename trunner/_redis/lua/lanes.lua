-- Priority lanes: the first lines of the scripts that find an entry's stream from its id,
-- or a message's stream from the message (see keys.py: entry_id, Keys.lane_stream).
-- A queue's default lane is its stream <base>; lane L is the stream <base>:L. trunner's id
-- of an entry of lane L is '<stream id>@L' (of the default lane, the stream id itself).
-- checked_entry(base, id) -> as lane_entry, or nil when id is not one trunner makes (what
-- something else wrote: '+', '7', a lane that is no lane name ...)
-- (Each part of a stream id is at most 2^64 - 1: Redis refuses '99999999999999999999-0',
-- and a script reading such an id with XRANGE or XPENDING failed every time.)
local function id_part(digits)
  return #digits < 20 or (#digits == 20 and digits <= '18446744073709551615')
end
local function checked_entry(base, id)
  local ms, seq, lane = string.match(id, '^(%d+)%-(%d+)@([%w_%.%-]+)$')
  if not ms then
    ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  end
  if not (ms and id_part(ms) and id_part(seq)) then
    return nil
  end
  if lane then
    return base .. ':' .. lane, ms .. '-' .. seq
  end
  return base, id
end
-- message_lane(base, message) -> the stream of the lane a message names (its first member,
-- '{"lane":"<name>",', written so by _wire/envelope.py), and the suffix of its ids.
-- A lane whose key holds something else than a stream (what trunner did not write; the
-- runners that read the lane set it aside) gives the default lane: the message runs there
-- rather than fail the script that moves it, or be lost.
local function message_lane(base, message)
  local lane = string.match(message, '^{"lane":"([%w_%.%-]+)",')
  if not lane or lane == 'default' then
    return base, ''
  end
  local stream = base .. ':' .. lane
  local kind = redis.call('TYPE', stream)
  if type(kind) == 'table' then
    kind = kind['ok']
  end
  if kind ~= 'stream' and kind ~= 'none' then
    return base, ''
  end
  return stream, '@' .. lane
end
