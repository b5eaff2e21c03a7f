-- budget_settle: release or hold a budget unit (``budget``), for the scripts that only settle one (ACK, BURY,
-- RELEASE, RECORD). Needs a local `now` declared before it (read only to hold a unit).
--! const UNLIMITED UNIT_PREFIX STRAY_MARK
-- luacheck: push ignore 211
-- release (hold_s 0) or hold: the solve may run hold_s more seconds at the API, so the unit stays counted that long.
-- `mine`: the caller still owns the task (a unit named after a task another worker took over is left to it).
local function budget_settle(units, unit, hold_s, mine)
  if unit == '' then return end
  if hold_s > 0 then
    redis.call('ZADD', units, 'GT', now + hold_s, unit)
  elseif mine or string.find(unit, STRAY_MARK, 1, true) then
    redis.call('ZREM', units, unit)
  end
end
-- luacheck: pop
