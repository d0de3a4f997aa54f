-- Read new entries from the streams of several lanes, in the order given, into one
-- consumer: each lane gives what it has up to what is still wanted, then the next (no
-- BLOCK: the fetch loop blocks on all lanes at once when this finds nothing).
-- KEYS     the lanes' streams, in the order to serve them
-- ARGV[1]  the consumer group
-- ARGV[2]  the consumer
-- ARGV[3]  the most entries to read in all
-- Returns  per lane that gave entries: {its index in KEYS (1-based), its entries}
local wanted = tonumber(ARGV[3])
local read = {}
for i = 1, #KEYS do
  if wanted <= 0 then
    break
  end
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', wanted,
    'STREAMS', KEYS[i], '>')
  if reply and reply[1] and #reply[1][2] > 0 then
    local entries = reply[1][2]
    read[#read + 1] = {i, entries}
    wanted = wanted - #entries
  end
end
return read
