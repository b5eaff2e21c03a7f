-- limits: the entries of {q}:limits, '<limit>:<holder>': one per holder, a worker ('<limit>:<worker id>',
-- budget.limit_member) or a hold ('<limit>:hold:<holder>', budget.hold_member). A worker id holds no ':', so a
-- hold's holder ('hold:<holder>') is never a worker's id: neither drops the other's entries.
-- luacheck: push ignore 211
local LIMIT_HOLDER = '^%d+:(.*)$'
-- remove every entry of `holder` but `keep` (nil: all of them): a holder's new limit replaces its earlier one,
-- whichever that was, with no need for the caller to know it
local function limits_drop(limits, holder, keep)
  for _, m in ipairs(redis.call('ZRANGE', limits, 0, -1)) do
    if m ~= keep and string.match(m, LIMIT_HOLDER) == holder then redis.call('ZREM', limits, m) end
  end
end
-- luacheck: pop
