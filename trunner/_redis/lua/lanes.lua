-- Priority lanes: the first lines of the scripts that find an entry's stream from its id,
-- or a message's stream from the message (see keys.py: entry_id, Keys.lane_stream).
-- A queue's default lane is its stream <base>; lane L is the stream <base>:L. trunner's id
-- of an entry of lane L is '<stream id>@L' (of the default lane, the stream id itself).
-- lane_entry(base, id) -> the entry's stream, its stream id (of an id trunner made)
local function lane_entry(base, id)
  local at = string.find(id, '@', 1, true)
  if not at then
    return base, id
  end
  return base .. ':' .. string.sub(id, at + 1), string.sub(id, 1, at - 1)
end
-- checked_entry(base, id) -> as lane_entry, or nil when id is not one trunner makes (what
-- something else wrote: '+', '7', a lane that is no lane name ...)
local function checked_entry(base, id)
  local stream_id, lane = string.match(id, '^(%d+%-%d+)@([%w_%.%-]+)$')
  if stream_id then
    return base .. ':' .. lane, stream_id
  end
  if string.match(id, '^%d+%-%d+$') then
    return base, id
  end
  return nil
end
-- message_lane(base, message) -> the stream of the lane a message names (its first member,
-- '{"lane":"<name>",', written so by message.encode_message), and the suffix of its ids
local function message_lane(base, message)
  local lane = string.match(message, '^{"lane":"([%w_%.%-]+)",')
  if not lane or lane == 'default' then
    return base, ''
  end
  return base .. ':' .. lane, '@' .. lane
end
