-- BUDGET_HOLD (budget.Budget.hold_limit): a limit held by a holder that is no worker -> limits
-- KEYS[1] units  KEYS[2] limits
-- ARGV[1] member (budget.hold_member: '<limit>:hold:<holder>', never a worker's)  ARGV[2] hold s
-- Registers the member until hold s from now, replacing an earlier hold of the same holder; returns {effective
-- limit, units in use}.
--! include now
--! include limits
--! include budget
local units, limits, member, hold_s = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
limits_drop(limits, string.match(member, LIMIT_HOLDER), member)
redis.call('ZADD', limits, now + hold_s, member)
redis.call('ZREMRANGEBYSCORE', limits, '-inf', now)
local b = budget_open({units = units, limits = limits, own = UNLIMITED})
return {b.limit, b.in_use}
