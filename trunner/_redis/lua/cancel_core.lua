-- Cancel core, the first lines of the scripts that take a task out of wherever it waits
-- (cancel_task.lua for one task, cancel_steps.lua for a workflow's steps), after
-- waiting.lua, lanes.lua and delivered.lua: one implementation of where a task may be
-- and how it leaves without ever running.
-- c (a table): stream (of the default lane), delayed, delayed_messages, delayed_unique
-- (the queue's delayed set, its messages, its unique delayed tasks), retries,
-- retry_messages (the group's delayed set of retries and its messages: the delayed set
-- itself for a group of its own), where (the where-map), waiters (the group's index of
-- tasks waiting for a concurrency slot), waiting_prefix (what its waiting lists' keys
-- start with), group (the consumer group), shared (more than one group reads the queue).
-- cancel_take(c, id, may_remove) -> where, detail. may_remove(message) says whether the
-- message found (its text) may be taken out; when it says no, nothing is written.
--   'kept'     found, and may_remove said no
--   'delayed'  taken out of a delayed set; detail: {message = its text, queue = true when
--              it was the queue's delayed set (a delayed dispatch), false for the retries}
--   'waiting'  taken out of its waiting list (and the index of waiters); detail:
--              {message = its text}
--   'queued'   its stream entry deleted (never delivered to a group that runs it) and its
--              where-map entry; detail: {message = its text (nil when it has none),
--              everyone = the entry is every group's, unread = the groups that had not
--              read it}
--   'running'  its entry is pending (in this group, or on a shared stream in any group)
--   'absent'   nowhere: no entry of this task (an id or where-map entry leading to another
--              task's is left alone), or one this group was given and no longer holds
local function cancel_take(c, id, may_remove)
  local held = redis.call('HGET', c.delayed_messages, id)
  if held and not may_remove(held) then
    return 'kept'
  end
  if c.retries ~= c.delayed then
    local retry = redis.call('HGET', c.retry_messages, id)
    if retry and not may_remove(retry) then
      return 'kept'
    end
  end
  if redis.call('ZREM', c.delayed, id) == 1 then
    local message = redis.call('HGET', c.delayed_messages, id)
    redis.call('HDEL', c.delayed_messages, id)
    redis.call('HDEL', c.delayed_unique, id)
    return 'delayed', {message = message, queue = true}
  end
  if c.retries ~= c.delayed and redis.call('ZREM', c.retries, id) == 1 then
    local message = redis.call('HGET', c.retry_messages, id)
    redis.call('HDEL', c.retry_messages, id)
    return 'delayed', {message = message, queue = false}
  end
  -- Waiting for a concurrency slot (it holds none): out of its waiting list.
  local waiting, message = waiting_of(c.waiters, id, c.waiting_prefix)
  if waiting and not may_remove(message) then
    return 'kept'
  end
  if waiting then
    redis.call('LREM', waiting, 1, message)
    redis.call('HDEL', c.waiters, id)
    return 'waiting', {message = message}
  end
  -- The task's entry: through the where-map, or its id itself; only an entry of this task
  -- (a where-map entry gone stale, or an id shaped like an entry id, may lead to another
  -- task's: it is left alone).
  local function entry_of_task()
    local found, entry = pcall(redis.call, 'HGET', c.where, id)
    if not found or not entry then
      entry = id
    end
    local stream, stream_id = checked_entry(c.stream, entry)
    if not stream then
      return false
    end
    local ok, entries = pcall(redis.call, 'XRANGE', stream, stream_id, stream_id)
    if not ok or #entries ~= 1 then
      return false
    end
    local fields = entries[1][2]
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'payload' then
        local decoded, body = pcall(cjson.decode, fields[i + 1])
        if decoded and type(body) == 'table' then
          local mine = entry == id
          if type(body.id) == 'string' then
            mine = body.id == id
          end
          return mine and stream, stream_id, body.group == nil, fields[i + 1]
        end
      end
    end
    return entry == id and stream, stream_id, false, nil
  end
  -- everyone: the entry is every group's (not a message of one group for itself)
  local stream, entry, everyone, payload = entry_of_task()
  if stream and not may_remove(payload) then
    return 'kept'
  end
  if c.shared then
    if not stream then
      return 'absent'
    end
    local unread = {} -- the groups that have not read it: they would never see it
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      for i = 1, #group, 2 do
        if group[i] == 'name' then
          local pending = redis.call('XPENDING', stream, group[i + 1], entry, entry, 1)
          if pending[1] then
            return 'running'
          end
          if not delivered_to(stream, group[i + 1], entry) then
            unread[#unread + 1] = group[i + 1]
          end
        end
      end
    end
    redis.call('XDEL', stream, entry) -- pending nowhere: no group runs it, none ever will
    redis.call('HDEL', c.where, id)
    return 'queued', {message = payload, everyone = everyone, unread = unread}
  end
  if stream then
    local ok, pending = pcall(redis.call, 'XPENDING', stream, c.group, entry, entry, 1)
    if ok and pending[1] then
      return 'running'
    end
    local delivered = ok and delivered_to(stream, c.group, entry)
    if not delivered then
      redis.call('XDEL', stream, entry)
      redis.call('HDEL', c.where, id)
      return 'queued', {message = payload, everyone = everyone, unread = {}}
    end
  end
  return 'absent'
end
