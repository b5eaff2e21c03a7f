-- batched: one command for many values (ZREM members, ZADD score-member pairs, RPUSH values) instead of one command
-- each, in chunks of BATCH that unpack() can take (an even count: pairs stay whole). For steps a script collects
-- while it goes and sends at its end (ACK, CLAIM: P1's commands per task); nothing in between reads what they write.
-- luacheck: push ignore 211
local BATCH = 1000
local function batched(cmd, key, values)
  for i = 1, #values, BATCH do
    redis.call(cmd, key, unpack(values, i, math.min(i + BATCH - 1, #values)))
  end
end
-- luacheck: pop
