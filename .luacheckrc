-- luacheck for the Redis scripts (scripts/lint-lua.py checks each one as assembled by store.scripts, as Redis
-- receives it). Redis runs Lua 5.1 with these globals; a script must define no global of its own (Redis refuses).
std = "lua51"
read_globals = {"KEYS", "ARGV", "redis", "cjson", "cmsgpack", "bit", "struct"}
max_line_length = 120
