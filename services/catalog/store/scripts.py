"""Lua scripts: every state change readers can observe happens in one atomic script."""

from __future__ import annotations

# KEYS: seq, staging, versions   ARGV: now (unix seconds)
# Hands out a version number and stages it in one step, so a Redis that loses its data can
# not come between the two. Never a number already staged or committed, even with `seq` gone
# and they not (an evicted or deleted key): the counter then restarts above them.
STAGE = """
local v = redis.call('INCR', KEYS[1])
local newest = tonumber(redis.call('ZREVRANGE', KEYS[3], 0, 0)[1] or '0')
for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if tonumber(m) > newest then newest = tonumber(m) end
end
if v <= newest then
  v = newest + 1
  redis.call('SET', KEYS[1], v)
end
redis.call('ZADD', KEYS[2], ARGV[1], v)
return v
"""

# KEYS: manifest, lookup, versions, current, catalogs, events, staging
# ARGV: manifest json, lookup json, version, name, stream maxlen, activate ("1" or "0")
# Returns 1 when `current` moved to this version, 0 when a newer one was already committed
# or activate is "0".
COMMIT = """
if redis.call('ZREM', KEYS[7], ARGV[3]) == 0 then
  return redis.error_reply('STAGING_LOST staging entry of version ' .. ARGV[3] .. ' is gone')
end
local v = tonumber(ARGV[3])
local top = redis.call('ZREVRANGE', KEYS[3], 0, 0)
local move = ARGV[6] == '1' and (#top == 0 or tonumber(top[1]) < v
    or redis.call('EXISTS', KEYS[4]) == 0)
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], v, ARGV[3])
redis.call('SADD', KEYS[5], ARGV[4])
if move then redis.call('SET', KEYS[4], ARGV[3]) end
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'name', ARGV[4], 'version', ARGV[3],
           'action', 'publish', 'current', move and '1' or '0')
if move then return 1 end
return 0
"""

# KEYS: manifest, versions, current, events   ARGV: version, name, stream maxlen
# Returns 0 (and changes nothing) unless the version is committed and complete.
ACTIVATE = """
if redis.call('EXISTS', KEYS[1]) == 0 or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'name', ARGV[2], 'version', ARGV[1],
           'action', 'activate', 'current', '1')
return 1
"""

# KEYS: versions, current, manifest, lookup   ARGV: version
# Makes a version invisible (bulk data is UNLINKed afterwards); never the current one.
RETIRE = """
if redis.call('GET', KEYS[2]) == ARGV[1] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('UNLINK', KEYS[3], KEYS[4])
return 1
"""
