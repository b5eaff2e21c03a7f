-- BUDGET_HOLD (budget.Budget.hold_limit): a limit held by a holder that is no worker -> limits
-- KEYS[1] units  KEYS[2] limits
-- ARGV[1] member (budget.limit_member)  ARGV[2] hold s
-- Registers the member until hold s from now, replacing an earlier entry of the same holder; returns {effective
-- limit, units in use}.
--! include now
--! include budget
local units, limits, member, hold_s = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local HOLDER = '^%d+:(.*)$'
local holder = string.match(member, HOLDER)
for _, m in ipairs(redis.call('ZRANGE', limits, 0, -1)) do
  if m ~= member and string.match(m, HOLDER) == holder then redis.call('ZREM', limits, m) end
end
redis.call('ZADD', limits, now + hold_s, member)
redis.call('ZREMRANGEBYSCORE', limits, '-inf', now)
local b = budget_open({units = units, limits = limits, own = UNLIMITED})
return {b.limit, b.in_use}
