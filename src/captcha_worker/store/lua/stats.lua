-- STATS (reads only, but drops expired budget units): the queue's counts for a caller without a limit of its own.
-- KEYS and ARGV as lib/counts.lua.
--! include now
--! const UNLIMITED
local own = UNLIMITED
--! include counts
