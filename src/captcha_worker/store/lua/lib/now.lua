-- now: the server's time in seconds (float). Server time keeps leases independent of worker clocks; scripts are
-- replicated by effects (Redis >= 5), so reading TIME is allowed before writes.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
