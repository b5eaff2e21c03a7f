-- KEEP_EXCERPT: while the operator's debugging window is open, keep a payload's redacted excerpt until it closes
-- KEYS[1] window ({q}:keep-raw)  KEYS[2] excerpt ({q}:raw:<sha256>) | ARGV[1] the excerpt
-- Returns 1 when kept, 0 when no window is open. One step: the excerpt ends when the window does (to the
-- millisecond), and none is written after `keep-raw --off` closed the window and deleted the excerpts.
local left_ms = redis.call('PTTL', KEYS[1])
if left_ms <= 0 then return 0 end  -- -2: no window; -1 (a window without a TTL) is never written: keep nothing
redis.call('SET', KEYS[2], ARGV[1], 'PX', left_ms)
return 1
