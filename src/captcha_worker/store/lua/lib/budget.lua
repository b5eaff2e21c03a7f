-- budget: the plan-thread budget inside a claim (``budget``): acquiring a unit and the limit in effect, plus
-- budget_settle. Needs a local `now`. `b` is {units = key, limits = key, own = limit or UNLIMITED}.
--! include budget_settle
-- luacheck: push ignore 211
local BUDGET_FULL, BUDGET_TAKEN, BUDGET_HELD = 0, 1, 2
-- the smallest limit of a live worker, and the caller's own
local function budget_limit(b)
  local limit = b.own
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', b.limits, now, '+inf')) do
    local l = tonumber(string.match(member, '^(%d+):'))
    if l and (limit == UNLIMITED or l < limit) then limit = l end
  end
  return limit
end
-- drop expired units; read the limit and the units in use
local function budget_open(b)
  redis.call('ZREMRANGEBYSCORE', b.units, '-inf', now)
  b.limit = budget_limit(b)
  b.in_use = redis.call('ZCARD', b.units)
  return b
end
-- acquire: HELD when the unit exists (a solve left running by an earlier owner), TAKEN when a free one was taken,
-- FULL when none is free
local function budget_take(b, unit, lease_s)
  if b.limit == UNLIMITED or b.in_use < b.limit then
    if redis.call('ZADD', b.units, 'NX', now + lease_s, unit) == 1 then  -- one call on the common path
      b.in_use = b.in_use + 1
      return BUDGET_TAKEN
    end
  elseif not redis.call('ZSCORE', b.units, unit) then
    return BUDGET_FULL
  end
  redis.call('ZADD', b.units, 'GT', now + lease_s, unit)
  return BUDGET_HELD
end
-- luacheck: pop
