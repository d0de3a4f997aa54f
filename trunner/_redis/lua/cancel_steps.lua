-- Sweep one page of a cancelled workflow's steps (after cancel_core.lua and workflows.lua;
-- design/workflows.md section 4.2): cancel_workflow.lua set its mark, and this takes out
-- every step it started and has not ended that waits where no runner holds it: delayed
-- (a retry's backoff, a deferral by a rate limit), waiting for a concurrency slot, or
-- queued (never delivered), as cancel_task.lua takes out a task (cancel_take). Each such
-- step ends 'cancelled' (workflows.lua: absorbed by the workflow, counted once by its ended
-- bit), its record says so when it keeps a result, its unique lock is released, and its
-- waiters are told. A step pending in a consumer's entries (running, or fetched), or found
-- nowhere, is left to the mark. A workflow with nothing live then settles at once. Atomic
-- and idempotent; the caller pages until the returned node is -1. A workflow that runs
-- (not cancelled, not failing) is not swept.
-- KEYS[1..5] the workflow's keys: wf, plan, marks, res, err
-- KEYS[6]  the group's index of live workflows
-- KEYS[7]  the task stream of the default lane
-- KEYS[8]  where moved tasks are
-- KEYS[9]  the cancel marks
-- KEYS[10] the quarantine stream
-- KEYS[11] the queue's registry of groups (a set)
-- KEYS[12] the queue's delayed set; KEYS[13] its messages; KEYS[14] its unique tasks
-- KEYS[15] the group's delayed set of retries; KEYS[16] its messages
-- KEYS[17] the group's index of tasks waiting for a concurrency slot
-- ARGV[1]  the workflow's id
-- ARGV[2]  the cancel channel; ARGV[3] the done channel; ARGV[4] how long a cancel mark
--          holds (ms); ARGV[5] the largest message a runner reads
-- ARGV[6]  the first node to look at
-- ARGV[7]  the most steps started and not ended to look at in this call (at most 1000;
--          and at most 16384 nodes are looked over)
-- ARGV[8]  the consumer group
-- ARGV[9]  what the keys of the group's waiting lists start with
-- ARGV[10] what the keys of the group's task records start with (the record of step
--          '<W>.<i>' is ARGV[10] .. '<W>.<i>')
-- ARGV[11] what the queue's unique locks start with (a unique step's lock is ARGV[11] ..
--          its message's unique_key)
-- Returns  {its state after the call, the next node to look at (-1 when every node was
--          looked at, or none will be), steps taken out, steps left to the mark}; the
--          state is 'gone' for no such workflow (-1); a running one is not swept (-1); an
--          error names what is wrong with keys trunner did not write
local k = wf_keys(KEYS, 1)
local wid = ARGV[1]
local why = wf_usable(k)
if why == 'gone' then
  return {'gone', -1, 0, 0}
end
if why then
  return redis.error_reply('ERR workflow ' .. wid .. ': ' .. why)
end
local refused = wrong_type({[KEYS[12]] = 'zset', [KEYS[13]] = 'hash', [KEYS[14]] = 'hash',
  [KEYS[15]] = 'zset', [KEYS[16]] = 'hash'})
if refused then
  return refused
end
local known, groups = pcall(redis.call, 'SCARD', KEYS[11]) -- another type: shared
local shared = not known or groups > 1
local ctx = wf_context(KEYS[7], KEYS[8], KEYS[9], KEYS[6], KEYS[10], shared, ARGV[2],
  ARGV[3], ARGV[4], ARGV[5])
if ctx.bad then
  return redis.error_reply('ERR workflow ' .. wid .. ': ' .. ctx.bad)
end
local state = redis.call('HGET', k.wf, 'state')
local n = tonumber(redis.call('HGET', k.wf, 'n'))
local first = checked_number(ARGV[6], {integer = true, digits = 12, min = 0}) or 0
if WF_SETTLED[state] or state == 'running' then
  return {state, -1, 0, 0}
end
local most = math.min(checked_number(ARGV[7], {integer = true, digits = 4, min = 1}) or 200,
  1000)
local c = {stream = KEYS[7], delayed = KEYS[12], delayed_messages = KEYS[13],
  delayed_unique = KEYS[14], where = KEYS[8], retries = KEYS[15], retry_messages = KEYS[16],
  waiters = KEYS[17], waiting_prefix = ARGV[9], group = ARGV[8], shared = shared}

-- The step of this workflow it should be: node i, of this group.
-- A message, decoded (nil when it is not a JSON object).
local function decoded(message)
  local ok, body = pcall(cjson.decode, message or '')
  if ok and type(body) == 'table' then
    return body
  end
end

-- Whether a message found is this workflow's node i, of this group; the bodies of those
-- accepted are kept by their message (the one taken out is read from it: decoded once).
local taken = {}
local function step_of(i)
  return function(message)
    local body = decoded(message)
    local mine = body ~= nil and type(body.wf) == 'table' and body.wf[1] == wid
      and body.wf[2] == i and body.group == ARGV[8]
    if mine then
      taken[message] = body
    end
    return mine
  end
end

local function finite(x)
  return type(x) == 'number' and x == x and x ~= math.huge and x ~= -math.huge
end

-- The 'cancelled' record of step id, from its message (as Outcomes.cancelled writes it).
local function record(id, body)
  if not body or type(body.task) ~= 'string' then
    return
  end
  if not (finite(body.keep_result) and body.keep_result >= 0) then
    return -- a step that keeps no result: the workflow's own keys tell of it (as a step
  end      -- cancelled by its workflow where it runs: Outcomes writes no record either)
  local keep = body.keep_result
  local keep_ms = math.max(1, math.min(math.ceil(keep * 1000), 2 ^ 53))
  local fields = {'state', 'cancelled', 'task', body.task, 'finished_at', ctx.now_s,
    'keep', string.format('%.17g', keep)}
  if finite(body.attempt) and body.attempt >= 1 and body.attempt <= 2147483647
      and body.attempt == math.floor(body.attempt) then
    fields[#fields + 1], fields[#fields + 2] = 'attempt', string.format('%d', body.attempt)
  end
  if finite(body.enqueued_at) then
    fields[#fields + 1], fields[#fields + 2] = 'enqueued_at',
      string.format('%.6f', body.enqueued_at)
  end
  local key = ARGV[10] .. id
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, string.format('%d', keep_ms))
end

-- A unique step taken out releases its lock (taken when it started, workflows.lua), as
-- cancel_task.lua releases a unique task's: only the lock it holds (its token). The key is
-- named from its message, not in KEYS: under the queue's hash tag, in the slot of KEYS[1].
local function release_lock(body)
  if not body or type(body.unique_key) ~= 'string' or type(body.unique_token) ~= 'string' then
    return
  end
  local key = ARGV[11] .. body.unique_key
  local found, held = pcall(redis.call, 'GET', key) -- another type: nobody's lock
  if found and held == body.unique_token then
    redis.call('DEL', key)
  end
end

local removed, left, told = 0, 0, {}
local node, looked = first, 0
local slice = 1024 -- bytes of the bitmap read at once: 4096 nodes, four slices a call at most
while node < n and looked < most and node < first + 4 * 4 * slice do
  local from = math.floor(node / 4)
  local bytes = redis.call('GETRANGE', k.marks, from, from + slice - 1)
  if #bytes == 0 then
    node = n
    break
  end
  for b = 1, #bytes do
    local byte = string.byte(bytes, b)
    for q = 0, 3 do
      local i = (from + b - 1) * 4 + q
      if i >= node and i < n and looked < most then
        local bits = math.floor(byte / 2 ^ (6 - 2 * q)) % 4
        if bits == 2 then -- started, not ended
          looked = looked + 1
          local id = wid .. '.' .. i
          taken = {}
          local where, detail = cancel_take(c, id, step_of(i))
          if where == 'delayed' or where == 'waiting' or where == 'queued' then
            local body = detail.message and taken[detail.message] or decoded(detail.message)
            record(id, body)
            release_lock(body)
            if redis.call('HDEL', ctx.cancelled, id) == 1 then -- its own mark, if it had
              redis.call('PUBLISH', ctx.cancel_channel, '\255forget ' .. id) -- one: gone
            end
            wf_end_node(k, wid, i, 'cancelled', '', '', '', ctx)
            told[#told + 1] = id
            removed = removed + 1
          else
            left = left + 1
          end
        end
        node = i + 1
      end
    end
    if looked >= most or node >= n then
      break
    end
  end
end
if #told > 0 then
  redis.call('PUBLISH', ctx.done_channel, table.concat(told, ' ')) -- the steps' waiters
end
wf_settle_if_idle(k, wid, ctx)
if node >= n then
  node = -1
end
return {redis.call('HGET', k.wf, 'state'), node, removed, left}
