-- Key types, the first lines of the scripts that write several keys: a key holding
-- another type (written by something else) must fail the script before it writes
-- anything, since Redis does not undo the writes of a script that fails midway. The
-- caller's loop sets the key aside (trunner._engine.quarantine) and tries again.
-- wrong_type({[key] = 'stream' | 'hash' | 'zset' ...}) -> a WRONGTYPE error reply, or nil
local function wrong_type(wanted)
  for key, want in pairs(wanted) do
    local had = redis.call('TYPE', key)
    if type(had) == 'table' then
      had = had['ok']
    end
    if had ~= want and had ~= 'none' then
      return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. had .. ', not a ' .. want)
    end
  end
end
