-- AUDIT (reads only): what breaks the invariants of docs/guarantees.md, as Redis shows it
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] budget
-- ARGV[1] task key prefix  ARGV[2] most members reported per check
-- Returns {check, member, ...} (queue.AuditCheck): a snapshot, in which a step in progress (an item between BLMOVE
-- and its lease, a claim of a finished id just before its ACK) may show; the caller confirms what persists. A unit
-- of a finished task is fine while its solve may still be answered (``captcha_until``: RECORD, or the hold of an ACK
-- or BURY); a unit of a task not finished is its solve's, running or left to be resumed.
--! include now
--! include is_id
--! const UNIT_PREFIX STRAY_MARK
local processing, leases, units, task_prefix, cap = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])
local out, counts = {}, {}
local function bad(check, member)
  counts[check] = (counts[check] or 0) + 1
  if counts[check] <= cap then out[#out + 1] = check; out[#out + 1] = member end
end
local function finished(task)
  local f = redis.call('HMGET', task, 'state', 'captcha_until')
  return f[1] and not (f[2] and tonumber(f[2]) > now)
end
local in_processing, leased = {}, {}
for _, item in ipairs(redis.call('LRANGE', processing, 0, -1)) do in_processing[item] = true end
for _, item in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
  leased[item] = true
  if not in_processing[item] then bad('lease_without_item', item) end
  if is_id(item) and redis.call('HEXISTS', task_prefix .. item, 'state') == 1 then
    bad('lease_of_finished_task', item)
  end
end
for item in pairs(in_processing) do
  if not leased[item] then bad('item_without_lease', item) end
end
for _, unit in ipairs(redis.call('ZRANGEBYSCORE', units, '(' .. now, '+inf')) do
  if string.sub(unit, 1, #UNIT_PREFIX) == UNIT_PREFIX and not string.find(unit, STRAY_MARK, 1, true)
      and finished(task_prefix .. string.sub(unit, #UNIT_PREFIX + 1)) then
    bad('unit_of_finished_task', unit)
  end
end
for check, n in pairs(counts) do
  if n > cap then out[#out + 1] = check; out[#out + 1] = string.format('(%d more)', n - cap) end
end
return out
