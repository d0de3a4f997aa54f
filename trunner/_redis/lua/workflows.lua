-- Workflows, the first lines of the scripts that start one or end its steps (after
-- lanes.lua, numbers.lua and locks.lua): design/workflows.md, section 3. A node's end is recorded by
-- the script call that ends the delivery that ended it (after its own fencing), once (the
-- ended bit); a node starts (its message is added) only inside such an end, or inside the
-- workflow's start, while the workflow runs, once (the started bit). Every counter is
-- touched only where its guarding bit flips from 0 to 1, so none can drift.
-- The keys of workflow W (k): k.wf (a hash: state, n, live, ok, failures, cancelled,
-- adding, ff, keep ...), k.plan (t:<i> templates, w:<i> inputs awaited, r:<i> readers
-- left), k.marks (a bitmap: bit 2i started, 2i + 1 ended), k.res (i -> result JSON),
-- k.err (i -> failure JSON).
-- ctx (wf_context): the lanes' base stream, the where-map, the cancel marks, the group's
-- index of live workflows, the quarantine stream, the cancel and done channels, until when
-- a cancel mark holds, the largest message a runner reads, whether the queue is shared,
-- and now.
-- Nothing here raises once a workflow has passed wf_usable: a step's end must never fail
-- the acknowledgement it is part of (Redis does not undo a script's earlier writes).
local WF_STATES = {running = true, failing = true, cancelling = true, succeeded = true,
  failed = true, cancelled = true}
local WF_SETTLED = {succeeded = true, failed = true, cancelled = true}
local WF_MAX_FAILURES_KEPT = 100
local WF_SLICE = 1000 -- unpack's and a reply's comfortable size

local function wf_keys(keys, at)
  return {wf = keys[at], plan = keys[at + 1], marks = keys[at + 2], res = keys[at + 3],
    err = keys[at + 4]}
end

local function wf_type(key)
  local kind = redis.call('TYPE', key)
  if type(kind) == 'table' then
    kind = kind['ok']
  end
  return kind
end

-- wf_context(base, where, cancelled, index, quarantine, shared, cancel channel, done
-- channel, mark lifetime ms, largest message bytes) -> ctx
local function wf_context(base, where, cancelled, index, quarantine, shared, cancel_channel,
    done_channel, mark_ms, max_bytes)
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local bad -- a key the steps' ends write, of another type: they are set aside, not failed
  for key, want in pairs({[where] = 'hash', [cancelled] = 'hash', [index] = 'zset'}) do
    local had = wf_type(key)
    if had ~= want and had ~= 'none' then
      bad = key .. ' holds a ' .. had .. ', not a ' .. want
    end
  end
  return {bad = bad, base = base, where = where, cancelled = cancelled, index = index,
    quarantine = quarantine, shared = shared, cancel_channel = cancel_channel,
    done_channel = done_channel, mark_until = ms + (tonumber(mark_ms) or 86400000),
    max_bytes = tonumber(max_bytes) or 0, now_ms = ms,
    now_s = string.format('%d.%03d', tonumber(t[1]), math.floor(tonumber(t[2]) / 1000))}
end

-- A workflow whose keys trunner did not write as they are (another type, a count that is
-- not one): said in the quarantine stream, and left as it is (best effort: the stream may
-- be of the wrong type itself, which the runners' loops set aside).
local function wf_set_aside(k, why, ctx)
  redis.pcall('XADD', ctx.quarantine, 'MAXLEN', '~', 10000, '*', 'source', 'workflow',
    'item', k.wf, 'reason', why, 'action', 'left as it is; the step end is not recorded',
    'value', '', 'instance', '', 'at', tostring(ctx.now_ms))
end

-- wf_usable(k) -> nil when the workflow's keys are as trunner writes them, 'gone' when it
-- has no state (expired, or never dispatched), else why not. Its numbers are then safe to
-- HINCRBY.
local function wf_usable(k)
  local kind = wf_type(k.wf)
  if kind == 'none' then
    return 'gone'
  end
  if kind ~= 'hash' then
    return 'a ' .. kind .. ', not a workflow hash'
  end
  for key, want in pairs({[k.plan] = 'hash', [k.marks] = 'string', [k.res] = 'hash',
      [k.err] = 'hash'}) do
    local had = wf_type(key)
    if had ~= want and had ~= 'none' then
      return key .. ' holds a ' .. had .. ', not a ' .. want
    end
  end
  local v = redis.call('HMGET', k.wf, 'state', 'n', 'live', 'ok', 'failures', 'cancelled',
    'keep', 'adding', 'ff', 'mark')
  if not WF_STATES[v[1]] then
    return "its state is not one trunner writes"
  end
  if not v[10] or not string.find(v[10], ' ', 1, true) then
    return 'its cancel mark is not one trunner writes'
  end
  local names = {'n', 'live', 'ok', 'failures', 'cancelled', 'keep'}
  for i = 1, 6 do
    local number, why = checked_number(v[i + 1], {integer = true, digits = 12, min = 0})
    if not number then
      return names[i] .. ': ' .. why
    end
  end
  if tonumber(v[7]) < 1 or (v[8] ~= '0' and v[8] ~= '1') or (v[9] ~= '0' and v[9] ~= '1') then
    return 'keep, adding or ff is not one trunner writes'
  end
  return nil
end

-- wf_each_node(next, n, i, fn): fn(j) for each successor of node i that `next` names
-- ("j,k", ranges "j-k"); false (and fn not called) when `next` is not such a list of
-- nodes after i and before n, ascending, none named twice.
local function wf_each_node(nxt, n, i, fn)
  local ranges, after = {}, i
  for item in string.gmatch(nxt, '[^,]+') do
    local first, last = string.match(item, '^(%d+)%-(%d+)$')
    if not first then
      first = string.match(item, '^(%d+)$')
      last = first
    end
    first, last = tonumber(first), tonumber(last)
    if not first or first <= after or last < first or last >= n then
      return false
    end
    ranges[#ranges + 1] = {first, last}
    after = last
  end
  for _, range in ipairs(ranges) do
    for j = range[1], range[2] do
      fn(j)
    end
  end
  return true
end

-- wf_assemble(template, res, ctx) -> the message, and the ranges of results it read;
-- raises on a template trunner did not write, or a result that is missing (run under
-- pcall).
local function wf_assemble(template, res, ctx)
  local out, read, at = {}, {}, 1
  while at <= #template do
    local kind = string.sub(template, at, at)
    if kind == 'N' then
      out[#out + 1] = ctx.now_s
      at = at + 1
    elseif kind == 'L' then
      local size, from = string.match(template, '^(%d+):()', at + 1)
      size = tonumber(size)
      if not size or from + size - 1 > #template then
        error('a literal runs past the template')
      end
      out[#out + 1] = string.sub(template, from, from + size - 1)
      at = from + size
    elseif kind == 'R' then
      local first, last, size, from = string.match(template, '^(%d+)%-(%d+),(%d+):()', at + 1)
      first, last, size = tonumber(first), tonumber(last), tonumber(size)
      if not size or last < first or from + size - 1 > #template then
        error('a range of results is not one')
      end
      local sep = string.sub(template, from, from + size - 1)
      local parts = {}
      for low = first, last, WF_SLICE do
        local fields = {}
        for i = low, math.min(low + WF_SLICE - 1, last) do
          fields[#fields + 1] = i
        end
        local values = redis.call('HMGET', res, unpack(fields))
        for x = 1, #fields do
          if not values[x] then
            error('the result of node ' .. fields[x] .. ' is missing')
          end
          parts[#parts + 1] = values[x]
        end
      end
      out[#out + 1] = table.concat(parts, sep)
      read[#read + 1] = {first, last}
      at = from + size
    else
      error('no part at byte ' .. at)
    end
  end
  return table.concat(out), read
end

-- The results node j read are in its message now: each is released when j was its last
-- reader (no r:<i> field: one reader; else r:<i> counts down).
local function wf_release(k, read)
  for _, range in ipairs(read) do
    local gone = {}
    for i = range[1], range[2] do
      local left = redis.call('HGET', k.plan, 'r:' .. i)
      if not left then
        gone[#gone + 1] = i
      else
        local number = checked_number(left, {integer = true, digits = 12, min = 1})
        if number == nil or number <= 1 then
          redis.call('HDEL', k.plan, 'r:' .. i)
          gone[#gone + 1] = i
        else
          redis.call('HSET', k.plan, 'r:' .. i, number - 1)
        end
      end
      if #gone >= WF_SLICE then
        redis.call('HDEL', k.res, unpack(gone))
        gone = {}
      end
    end
    if #gone > 0 then
      redis.call('HDEL', k.res, unpack(gone))
    end
  end
end

-- A key written after the workflow's start lives as long as the workflow.
local function wf_same_life(k, key)
  if redis.call('PTTL', key) == -1 then
    local ttl = redis.call('PTTL', k.wf)
    if ttl > 0 then
      redis.call('PEXPIRE', key, ttl)
    end
  end
end

local function wf_failure(i, kind, why, ctx)
  return cjson.encode({type = kind, message = why, node = i, at = ctx.now_ms})
end

-- One mark cancels every step of the workflow wherever it is (its name, '<group> <id>',
-- is no task's), and one announcement makes the runners holding its steps cancel them now.
local function wf_cancel_steps(k, ctx)
  local mark = redis.call('HGET', k.wf, 'mark')
  redis.call('HSET', ctx.cancelled, mark, ctx.mark_until)
  redis.call('PUBLISH', ctx.cancel_channel, mark)
end

local wf_start_node -- (mutual recursion: a node that cannot start ends at once)

-- The end of node i, without the settle check (it may run nested, from wf_start_node).
local function wf_end_node(k, wid, i, kind, nxt, result, err, ctx)
  if redis.call('SETBIT', k.marks, 2 * i + 1, 1) == 1 then
    return -- ended before: a duplicate delivery, a replay, a late end: it counts once
  end
  redis.call('HINCRBY', k.wf, 'live', -1)
  local state = redis.call('HGET', k.wf, 'state')
  if kind == 'ok' then
    redis.call('HINCRBY', k.wf, 'ok', 1)
    if result ~= '' then
      redis.call('HSET', k.res, i, result)
      wf_same_life(k, k.res)
    end
    if state == 'running' then
      local n = tonumber(redis.call('HGET', k.wf, 'n'))
      local well = wf_each_node(nxt, n, i, function(j)
        local left = checked_number(redis.call('HGET', k.plan, 'w:' .. j) or '',
          {integer = true, digits = 12, min = 1})
        if left == nil then
          -- no count of inputs (a node that started, or a plan trunner did not write):
          -- a node that has not started cannot, and fails; one that has is left alone
          if redis.call('GETBIT', k.marks, 2 * j) == 0 then
            redis.call('SETBIT', k.marks, 2 * j, 1)
            redis.call('HINCRBY', k.wf, 'live', 1)
            wf_end_node(k, wid, j, 'failed', '', '',
              wf_failure(j, 'BadData', 'its count of inputs is missing or not a count', ctx),
              ctx)
          end
        elseif left == 1 then
          wf_start_node(k, wid, j, ctx) -- its last input: it starts now
        else
          redis.call('HSET', k.plan, 'w:' .. j, left - 1)
        end
      end)
      if not well then
        wf_set_aside(k, 'node ' .. i .. ': its successors are not nodes after it', ctx)
      end
    end
  elseif kind == 'cancelled' and state ~= 'running' then
    redis.call('HINCRBY', k.wf, 'cancelled', 1) -- cancelled by the workflow: absorbed, as
  else                                          -- trio.Cancelled is in a nursery
    redis.call('HINCRBY', k.wf, 'failures', 1) -- failed | expired | cancelled on its own
    if redis.call('HLEN', k.err) < WF_MAX_FAILURES_KEPT then
      redis.call('HSET', k.err, i, err)
      wf_same_life(k, k.err)
    end
    if state == 'running' and redis.call('HGET', k.wf, 'ff') == '1' then
      redis.call('HSET', k.wf, 'state', 'failing')
      wf_cancel_steps(k, ctx)
    end -- else only its descendants are blocked: they never start
  end
end

-- A unique step's lock, taken as the step starts (after locks.lua): its plan field
-- u:<j>, '<ttl ms> <token> <lock key>', written by the dispatch as a unique dispatch's lock
-- (its message carries the same key and token, so that its end releases it as any unique
-- task's). The lock key is not in KEYS (design/workflows.md §9 Q2): the dispatch named it
-- after the group's hash tag, so it is in the workflow's slot and Cluster-safe; checked
-- here, so that a plan trunner did not write fails the node, never the script. Returns nil
-- when the lock is taken, else node j's failure (JSON, naming the task of its `message`
-- when it reads it): nothing taken.
local function wf_take_lock(k, j, spec, message, ctx)
  local ttl, token, at = string.match(spec, '^(%d+) (%x+) ()')
  ttl = checked_number(ttl or '', {integer = true, digits = 12, min = 1})
  local key = at and string.sub(spec, at) or ''
  local tag = string.match(k.wf, '^[^{]*{[^}]*}')
  local kind, why
  if not ttl or not tag or #key <= #tag or string.sub(key, 1, #tag) ~= tag then
    kind, why = 'BadData', 'its unique lock is not one trunner writes'
  elseif not take_lock(key, token, ttl, ctx.quarantine) then
    kind, why = 'TaskAlreadyDispatched', 'its unique key is locked: ' .. key ..
      ' is held by a task of that key (queued, running or waiting for a retry)'
  else
    return nil
  end
  local task = string.match(message, '^{"task":"([^"\\]*)"') or
    string.match(message, '^{"lane":"[^"\\]*","task":"([^"\\]*)"')
  return cjson.encode({type = kind, message = why, node = j, at = ctx.now_ms, task = task})
end

wf_start_node = function(k, wid, j, ctx)
  if redis.call('HGET', k.wf, 'state') ~= 'running' then
    return -- read again: a sibling started before it in this loop may have failed it
  end
  if redis.call('SETBIT', k.marks, 2 * j, 1) == 1 then
    return -- started before
  end
  redis.call('HINCRBY', k.wf, 'live', 1)
  local plan = redis.call('HMGET', k.plan, 't:' .. j, 'u:' .. j)
  local template, lock = plan[1], plan[2]
  redis.call('HDEL', k.plan, 't:' .. j, 'w:' .. j, 'u:' .. j)
  local ok, message, read = false, 'its template is missing', nil
  if template then
    ok, message, read = pcall(wf_assemble, template, k.res, ctx)
  end
  if not ok then
    local why = string.gsub(tostring(message), '^.-: ', '') -- without Lua's position
    wf_end_node(k, wid, j, 'failed', '', '', wf_failure(j, 'BadData', why, ctx), ctx)
    return
  end
  if ctx.max_bytes > 0 and #message > ctx.max_bytes then
    wf_release(k, read)
    wf_end_node(k, wid, j, 'failed', '', '', wf_failure(j, 'PayloadTooLarge',
      'its message would be ' .. #message .. ' bytes, more than the ' .. ctx.max_bytes ..
      ' a runner reads', ctx), ctx)
    return
  end
  local refused = lock and wf_take_lock(k, j, lock, message, ctx)
  if refused then
    wf_release(k, read)
    wf_end_node(k, wid, j, 'failed', '', '', refused, ctx)
    return
  end
  local stream, suffix = message_lane(ctx.base, message)
  local entry = redis.call('XADD', stream, '*', 'payload', message)
  redis.call('HSET', ctx.where, wid .. '.' .. j, entry .. suffix)
  wf_release(k, read)
end

-- Settle the workflow when nothing of it is live and no root is being added: its final
-- state, its keys kept for `keep` ms, out of the index, its waiters told. A workflow that no
-- longer runs (failing, cancelling) adds no root any more (workflow_start.lua refuses the
-- later chunks): its 'adding' holds nothing back.
local function wf_settle_if_idle(k, wid, ctx)
  local v = redis.call('HMGET', k.wf, 'live', 'adding', 'state', 'n', 'ok', 'failures', 'keep')
  if tonumber(v[1]) > 0 or (v[2] == '1' and v[3] == 'running') or WF_SETTLED[v[3]] then
    return -- a nursery waits for its children
  end
  local final = 'failed' -- a node never started needs a failure before it: an error
  if tonumber(v[6]) > 0 then -- is never lost
    final = 'failed'
  elseif v[3] == 'cancelling' then
    final = 'cancelled'
  elseif tonumber(v[5]) == tonumber(v[4]) then
    final = 'succeeded'
  end
  redis.call('HSET', k.wf, 'state', final, 'finished', ctx.now_ms)
  redis.call('DEL', k.plan)
  for _, key in ipairs({k.wf, k.marks, k.res, k.err}) do
    redis.call('PEXPIRE', key, v[7])
  end
  redis.call('ZREM', ctx.index, wid)
  local mark = redis.call('HGET', k.wf, 'mark') -- its steps are all over: the runners
  if redis.call('HDEL', ctx.cancelled, mark) == 1 then -- forget its mark
    redis.call('PUBLISH', ctx.cancel_channel, '\255forget ' .. mark)
  end
  redis.call('PUBLISH', ctx.done_channel, wid)
end

-- What the scripts ending a step call, after their own fencing: node i of workflow wid
-- ended (kind 'ok' | 'failed' | 'cancelled' | 'expired'), with its successors `nxt`, its
-- result ('' when not kept) and its failure JSON ('' unless failed). Returns the
-- workflow's state after it (nil when the workflow is gone or was set aside).
local function wf_step_end(k, wid, i, kind, nxt, result, err, ctx)
  local why = ctx.bad or wf_usable(k)
  if why == 'gone' then
    return nil -- expired, or never ours: the end of the delivery stands alone
  end
  if why then
    wf_set_aside(k, why, ctx)
    return nil
  end
  local n = tonumber(redis.call('HGET', k.wf, 'n'))
  if i >= n or redis.call('GETBIT', k.marks, 2 * i) == 0 then
    wf_set_aside(k, 'node ' .. i .. ' ended, but it is not a node started (of ' .. n .. ')',
      ctx)
    return nil
  end
  wf_end_node(k, wid, i, kind, nxt, result, err, ctx)
  wf_settle_if_idle(k, wid, ctx)
  return redis.call('HGET', k.wf, 'state')
end
