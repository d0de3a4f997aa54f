-- Where a task is, in one look (read-only): its record, the delayed set, the stream (its
-- entry found by the task id itself or through the where-map), and the group's progress.
-- What something else wrote never fails the look: a key of the wrong type reads as
-- missing, an id that is not an entry id (or names no entry) as no entry.
-- KEYS[1]  the task stream (of the default lane: an entry id names its lane, lanes.lua)
-- KEYS[2]  the delayed set
-- KEYS[3]  the delayed messages
-- KEYS[4]  where moved tasks are (hash: task id -> stream id)
-- KEYS[5]  the task's record
-- KEYS[6]  the group's delayed set of retries (the delayed set, for a group of its own)
-- KEYS[7]  its messages
-- KEYS[8]  the group's index of tasks waiting for a concurrency slot (waiting.lua)
-- ARGV[1]  the consumer group
-- ARGV[2]  the task id
-- ARGV[3]  what the keys of the group's waiting lists start with
-- Returns  {record (flat field/value list, or the JSON object of an outcome written as
--           one), due ms or false, delayed message or false,
--           entry id or false, entry fields (flat) or false, pending consumer or false,
--           deliveries (0 when not pending), delivered (1 when the group delivered the
--           entry already, 0 when not yet), its message while it waits for a
--           concurrency slot or false}
local id = ARGV[2]
local function read(default, ...)
  local ok, value = pcall(redis.call, ...)
  if ok then
    return value
  end
  return default
end
local record = read(false, 'HGETALL', KEYS[5])
if not record then  -- an outcome written as one JSON object (ack.lua): returned as it is
  record = read({}, 'GET', KEYS[5]) or {}
end
local due = read(false, 'ZSCORE', KEYS[2], id)
local delayed = false
if due then
  delayed = read(false, 'HGET', KEYS[3], id)
elseif KEYS[6] ~= KEYS[2] then
  due = read(false, 'ZSCORE', KEYS[6], id)
  if due then
    delayed = read(false, 'HGET', KEYS[7], id)
  end
end
local entry_id = read(false, 'HGET', KEYS[4], id)
if not entry_id then
  entry_id = id
end
local stream, stream_id = checked_entry(KEYS[1], entry_id) -- '+', '7' ... would range over others
local fields, consumer, deliveries, delivered = false, false, 0, 0
if stream and redis.call('EXISTS', stream) == 1 then
  local entries = read({}, 'XRANGE', stream, stream_id, stream_id)
  if entries[1] then
    fields = entries[1][2]
    local ok, pending = pcall(redis.call, 'XPENDING', stream, ARGV[1], stream_id, stream_id, 1)
    if ok and pending[1] then
      consumer, deliveries, delivered = pending[1][2], pending[1][4], 1
    elseif ok and delivered_to(stream, ARGV[1], stream_id) then
      delivered = 1
    end
  else
    entry_id = false
  end
else
  entry_id = false
end
local _, waiting = waiting_of(KEYS[8], id, ARGV[3])
return {record, due or false, delayed, entry_id, fields, consumer, deliveries, delivered,
  waiting or false}
