-- PINGBACK_RECEIVE (pingback.Receiver): CaptchaAI's callback -> the record's answer + the owner's wake list
-- KEYS[1] the record  KEYS[2] the wake list of the worker the caller read from it
-- ARGV[1] token hash  ARGV[2] captcha id  ARGV[3] code  ARGV[4] user agent ('' = none)  ARGV[5] that worker
-- ARGV[6] wake TTL (s)  ARGV[7] handle
-- Returns 'accepted', 'unknown', 'forbidden', 'duplicate' or 'moved' (the record names another worker now: read
-- it again). Every key the script touches is declared (Redis Cluster routes and checks by KEYS).
local rec = redis.call('HMGET', KEYS[1], 'h', 'w', 'c', 'a', 's')
if not rec[1] then return 'unknown' end
if rec[1] ~= ARGV[1] then return 'forbidden' end
if rec[3] and rec[3] ~= ARGV[2] then return 'forbidden' end
if rec[4] or rec[5] then return 'duplicate' end
if rec[2] ~= ARGV[5] then return 'moved' end
redis.call('HSET', KEYS[1], 'a', ARGV[3], 'i', ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'u', ARGV[4]) end
redis.call('RPUSH', KEYS[2], ARGV[7])
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
return 'accepted'
