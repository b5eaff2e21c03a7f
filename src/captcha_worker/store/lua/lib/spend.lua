-- spend: the spend cap's records and windows (``spend``), shared by its three scripts. Needs `now`.
-- KEYS[1] records  KEYS[2] expiries  KEYS[3] windows  KEYS[4] totals (``spend.SpendKeys``).
--! const KEEP_S HOUR_S DAY_S
-- luacheck: push ignore 211
local REC, EXP, WIN, TOTAL = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function int(x) return string.format('%.0f', x) end
local function num(v) return tonumber(v or '0') or 0 end
local function parse(v)
  local s, a, c, hb, db, label = string.match(v, '^(%u)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  return {state = s, amount = tonumber(a), charged = tonumber(c), hb = hb, db = db, label = label}
end
local function store(id, r)
  redis.call('HSET', REC, id, r.state .. '|' .. int(r.amount) .. '|' .. int(r.charged) .. '|' .. r.hb .. '|' ..
             r.db .. '|' .. r.label)
end
-- move the windows a reservation was made in by delta
local function shift(r, delta)
  if delta ~= 0 then
    redis.call('HINCRBY', WIN, 'h:' .. r.hb, int(delta))
    redis.call('HINCRBY', WIN, 'd:' .. r.db, int(delta))
  end
end
-- expire reservations past their time (charged at their amount) and forget old expired/settled ones
local function sweep()
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', EXP, '-inf', now)) do
    local v = redis.call('HGET', REC, id)
    local r = v and parse(v)
    if r and r.state == 'R' then
      r.state, r.charged = 'E', r.amount
      store(id, r)
      redis.call('HINCRBY', WIN, 'reserved', int(-r.amount))
      redis.call('HINCRBY', TOTAL, r.label, int(r.amount))
      redis.call('ZADD', EXP, now + KEEP_S, id)
    else
      redis.call('HDEL', REC, id)
      redis.call('ZREM', EXP, id)
    end
  end
end
-- luacheck: pop
