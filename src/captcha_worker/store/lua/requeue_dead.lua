-- REQUEUE_DEAD: dead -> pending (counts reset) while the task body is still stored
-- KEYS[1] dead  KEYS[2] pending  KEYS[3] task hash  KEYS[4] result
-- ARGV[1] dead entry  ARGV[2] item to push  ARGV[3] mode: 'stored' (the task's stored body), 'body' (ARGV[5], from
-- an entry of an older version), 'raw' (push ARGV[2] as it is)  ARGV[4] task ttl  ARGV[5] body
-- Returns 1, 0 (entry gone) or GONE (no body left).
local GONE = -1
local dead, pending, task, result = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local entry, item, mode, ttl, body = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not redis.call('LPOS', dead, entry) then return 0 end
if mode == 'stored' and redis.call('HEXISTS', task, 'body') == 0 then return GONE end
redis.call('LREM', dead, 1, entry)
if mode ~= 'raw' then
  if mode == 'body' then redis.call('HSET', task, 'body', body) end
  redis.call('HDEL', task, 'state', 'last_error', 'attempts', 'failures', 'deaths', 'owner', 'unit_given',
             'captcha_id', 'captcha_until')
  redis.call('EXPIRE', task, ttl)
  redis.call('DEL', result)
end
redis.call('RPUSH', pending, item)
return 1
