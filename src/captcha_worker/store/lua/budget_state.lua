-- BUDGET_STATE (budget.Budget.state): the limit in effect (drops expired units)
-- KEYS[1] units  KEYS[2] limits
-- ARGV[1] own limit
-- Returns {effective limit, units in use}.
--! include now
--! include budget
local b = budget_open({units = KEYS[1], limits = KEYS[2], own = tonumber(ARGV[1])})
return {b.limit, b.in_use}
