-- KEEP_EXCERPT: while the operator's debugging window is open, keep a payload's redacted excerpt until it closes
-- KEYS[1] window ({q}:keep-raw)  KEYS[2] excerpt ({q}:raw:<sha256>) | ARGV[1] the excerpt
-- Returns 1 when kept, 0 when no window is open. One step: the excerpt expires at the window's end, the absolute
-- millisecond OPEN_RAW_WINDOW stored as the window's value (not a time left read here: a server whose clock runs
-- on inside a script would make that a millisecond late), and none is written after `keep-raw --off` closed the
-- window and deleted the excerpts.
local left_ms = redis.call('PTTL', KEYS[1])
local ends = tonumber(redis.call('GET', KEYS[1]))
-- no window (-2), one without a TTL (-1), or one whose value is no OPEN_RAW_WINDOW end (a version before it
-- stored seconds): keep nothing
if left_ms <= 0 or not ends or ends < 1e12 then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PXAT', ends)
return 1
