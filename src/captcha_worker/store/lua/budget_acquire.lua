-- BUDGET_ACQUIRE (budget.Budget.acquire): free units -> budget, up to the effective limit
-- KEYS[1] units  KEYS[2] limits
-- ARGV[1] own limit  ARGV[2] lease s  ARGV[3..] units wanted
-- Returns the units the caller holds now (taken, or held already).
--! include now
--! include budget
local b = budget_open({units = KEYS[1], limits = KEYS[2], own = tonumber(ARGV[1])})
local lease_s = tonumber(ARGV[2])
local got = {}
for i = 3, #ARGV do
  if budget_take(b, ARGV[i], lease_s) ~= BUDGET_FULL then got[#got + 1] = ARGV[i] end
end
return got
