-- budget_settle: release or hold a budget unit (``budget``), for the scripts that only settle one (ACK, BURY,
-- RELEASE, RECORD). Needs a local `now` declared before it (read only to hold a unit).
--! const UNLIMITED UNIT_PREFIX STRAY_MARK
--! include batched
-- luacheck: push ignore 211
-- release (hold_s 0) or hold: the solve may run hold_s more seconds at the API, so the unit stays counted that long.
-- `mine`: the caller still owns the task (a unit named after a task another worker took over is left to it).
-- `drops` (optional; ACK's batch): a release is collected there and sent by budget_drop at the end, one ZREM for all;
-- a hold of a unit collected before applies that release first, so the steps on one unit keep their order.
local function budget_settle(units, unit, hold_s, mine, drops)
  if unit == '' then return end
  if hold_s > 0 then
    if drops and drops.set[unit] then
      drops.set[unit] = nil
      redis.call('ZREM', units, unit)
    end
    redis.call('ZADD', units, 'GT', now + hold_s, unit)
  elseif mine or string.find(unit, STRAY_MARK, 1, true) then
    if drops then drops.set[unit] = true else redis.call('ZREM', units, unit) end
  end
end
local function budget_drop(units, drops)
  local members = {}
  for unit in pairs(drops.set) do members[#members + 1] = unit end
  batched('ZREM', units, members)
end
-- luacheck: pop
