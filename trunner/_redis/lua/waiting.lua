-- A task waiting for a concurrency slot, found by its id: the first lines of the scripts
-- that look for a task (task_status.lua) or cancel it (cancel_task.lua).
-- waiting_of(index, task id, prefix) -> the waiting list's key and the task's message in
-- it, or nil. The group's index of waiters (limits.lua: index_waiter; hash: task id ->
-- '<n>:<waiting list key><message>') says where; the list must still hold the message (an
-- index entry is dropped when its waiter is granted). Only a key starting with prefix
-- (the group's waiting lists, Keys.concurrency_waiting('')) is looked at; what something
-- else wrote (another type, another shape) is no waiter.
local function waiting_of(index, task_id, prefix)
  local ok, value = pcall(redis.call, 'HGET', index, task_id)
  if not ok or not value then
    return nil
  end
  local n, rest = string.match(value, '^(%d+):(.*)$')
  n = tonumber(n)
  if not n or n > #rest then
    return nil
  end
  local waiting, message = string.sub(rest, 1, n), string.sub(rest, n + 1)
  if string.sub(waiting, 1, #prefix) ~= prefix then
    return nil
  end
  local found, at = pcall(redis.call, 'LPOS', waiting, message)
  if not found or not at then
    return nil
  end
  return waiting, message
end
