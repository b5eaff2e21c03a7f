-- BUDGET_RENEW (budget.Budget.renew): units kept at least a lease from now
-- KEYS[1] units
-- ARGV[1] lease s  ARGV[2..] units
-- Never shortens a hold; a unit that is gone (it expired while its worker stalled) is counted again at once, since
-- its solve runs on. Returns those.
--! include now
local units, lease_s = KEYS[1], tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  if not redis.call('ZSCORE', units, ARGV[i]) then lost[#lost + 1] = ARGV[i] end
  redis.call('ZADD', units, 'GT', now + lease_s, ARGV[i])
end
return lost
