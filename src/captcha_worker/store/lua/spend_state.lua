-- SPEND_STATE (spend.Spend.state): the windows and the ledger (expires what is due first)
-- KEYS as lib/spend.lua
-- Returns {this hour's micro, this day's micro, reserved micro, label, micro, label, ...}.
--! include now
--! include spend
sweep()
local hk, dk = 'h:' .. int(math.floor(now / HOUR_S)), 'd:' .. int(math.floor(now / DAY_S))
local out = {int(num(redis.call('HGET', WIN, hk))), int(num(redis.call('HGET', WIN, dk))),
             int(num(redis.call('HGET', WIN, 'reserved')))}
for _, x in ipairs(redis.call('HGETALL', TOTAL)) do out[#out + 1] = x end
return out
