-- PINGBACK_BIND (pingback.Hub.bind): in.php answered: the record accepts callbacks of that captcha id only
-- KEYS[1] the record
-- ARGV[1] captcha id  ARGV[2] TTL (ms)  ARGV[3] ended TTL (ms)
-- Returns {answer, user agent} when a callback of that id came first, else false (a callback that named another id
-- is dropped).
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSET', KEYS[1], 'c', ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
local got = redis.call('HMGET', KEYS[1], 'a', 'u', 'i')
if not got[1] then return false end
if got[3] ~= ARGV[1] then redis.call('HDEL', KEYS[1], 'a', 'u', 'i') return false end
redis.call('HDEL', KEYS[1], 'a', 'u', 'i')
redis.call('HSET', KEYS[1], 's', '1')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return {got[1], got[2] or ''}
