-- SPEND_RESERVE (spend.Spend.reserve): an amount reserved in this hour's and day's windows, unless over a cap
-- KEYS as lib/spend.lua
-- ARGV[1] id  ARGV[2] amount (micro)  ARGV[3] ttl s  ARGV[4] hour cap  ARGV[5] day cap  ARGV[6] label  ARGV[7] hours
-- kept  ARGV[8] days kept
-- Returns {outcome, hour's micro, day's micro} (after it).
--! include now
--! include spend
sweep()
local id, amount, ttl_s = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cap_h, cap_d, label = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local hb, db = math.floor(now / HOUR_S), math.floor(now / DAY_S)
local hk, dk = 'h:' .. int(hb), 'd:' .. int(db)
local hour, day = num(redis.call('HGET', WIN, hk)), num(redis.call('HGET', WIN, dk))
local v = redis.call('HGET', REC, id)
if v then
  return {parse(v).state == 'R' and 'held' or 'done', int(hour), int(day)}
end
if hour + amount > cap_h then return {'over_hour', int(hour), int(day)} end
if day + amount > cap_d then return {'over_day', int(hour), int(day)} end
store(id, {state = 'R', amount = amount, charged = 0, hb = int(hb), db = int(db), label = label})
redis.call('ZADD', EXP, now + ttl_s, id)
redis.call('HINCRBY', WIN, hk, int(amount))
redis.call('HINCRBY', WIN, dk, int(amount))
redis.call('HINCRBY', WIN, 'reserved', int(amount))
if redis.call('HLEN', WIN) > tonumber(ARGV[7]) + tonumber(ARGV[8]) + 1 then
  for _, f in ipairs(redis.call('HKEYS', WIN)) do
    local w, b = string.match(f, '^([hd]):(%d+)$')
    if (w == 'h' and tonumber(b) < hb - tonumber(ARGV[7])) or (w == 'd' and tonumber(b) < db - tonumber(ARGV[8])) then
      redis.call('HDEL', WIN, f)
    end
  end
end
return {'reserved', int(hour + amount), int(day + amount)}
