-- PINGBACK_TAKE (pingback.Hub.take): the solve ended or was woken: the answer leaves Redis either way
-- KEYS[1] the record
-- ARGV[1] ended TTL (ms)
-- Returns {answer, user agent}, or false when no callback stored one.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local got = redis.call('HMGET', KEYS[1], 'a', 'u')
redis.call('HDEL', KEYS[1], 'a', 'u', 'i')
redis.call('HSET', KEYS[1], 's', '1')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
if not got[1] then return false end
return {got[1], got[2] or ''}
