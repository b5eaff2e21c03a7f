-- SPEND_SETTLE (spend.Spend.settle): a reservation settled at its cost (or an expired one corrected)
-- KEYS as lib/spend.lua
-- ARGV[1] id  ARGV[2] cost (micro)
-- Returns {outcome, micro charged for the id}.
--! include now
--! include spend
sweep()
local id, cost = ARGV[1], tonumber(ARGV[2])
local v = redis.call('HGET', REC, id)
if not v then return {'unknown', '0'} end
local r = parse(v)
if r.state == 'S' then return {'settled_already', int(r.charged)} end
local was = r.state
if was == 'R' then
  shift(r, cost - r.amount)
  redis.call('HINCRBY', WIN, 'reserved', int(-r.amount))
else
  shift(r, cost - r.charged)
end
redis.call('HINCRBY', TOTAL, r.label, int(cost - r.charged))
r.state, r.charged = 'S', cost
store(id, r)
redis.call('ZADD', EXP, now + KEEP_S, id)
return {was == 'R' and 'settled' or 'corrected', int(cost)}
