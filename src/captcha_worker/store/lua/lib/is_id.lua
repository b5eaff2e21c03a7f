-- is_id(item): whether a queue item is a task id (task.valid_task_id is the same rule); anything else is a raw
-- payload.
--! const MAX_ID
-- luacheck: push ignore 211
local function is_id(item)
  return #item <= MAX_ID and string.find(item, '^[%w_.:%-]+$') ~= nil
end
-- luacheck: pop
