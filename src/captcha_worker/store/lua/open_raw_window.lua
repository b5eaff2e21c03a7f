-- OPEN_RAW_WINDOW: open (or move the end of) the operator's debugging window, `seconds` from now by the server's clock
-- KEYS[1] window ({q}:keep-raw) | ARGV[1] seconds (> 0)
-- Returns the window's end (unix ms). The window's value is that end, and the key expires at it (PXAT): every
-- excerpt KEEP_EXCERPT writes expires at the same millisecond, however long after its own read it runs.
--! include now
local ends = math.floor(now * 1000) + tonumber(ARGV[1]) * 1000
redis.call('SET', KEYS[1], ends, 'PXAT', ends)
return ends
