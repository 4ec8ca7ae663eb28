"""The job store's Lua scripts: each reads and changes one job atomically, so a redelivered
chunk, a cancel, a completion and a retry of failed rows never interleave into an inconsistent
job. KEYS are always the job's four keys (record, results, failed, rows; `JobStore.keys`),
plus the chunks-queued set where a script queues chunks (`chunk_leases`)."""

from __future__ import annotations

# ARGV: row, line, is_error, ttl, now. 1: written; 0: the row was there; -1: the job is gone.
WRITE_ROW = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local new = redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
if new == 1 and ARGV[3] == '1' then redis.call('SADD', KEYS[3], ARGV[1]) end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[5])
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
return new
"""

# ARGV: ttl, now. Ends a job whose rows all have a result: succeeded (no row failed),
# failed (every row did) or completed_with_errors.
FINISH = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return nil end
if status ~= 'queued' and status ~= 'running' then return status end
local total = tonumber(redis.call('HGET', KEYS[1], 'total'))
if redis.call('HLEN', KEYS[2]) < total then return status end
local failed = redis.call('SCARD', KEYS[3])
status = 'completed_with_errors'
if failed == 0 then status = 'succeeded' elseif failed >= total then status = 'failed' end
redis.call('HSET', KEYS[1], 'status', status, 'updated_at', ARGV[2])
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
return status
"""

# ARGV: from, to, ttl, now. Moves a job in status `from` ('*': any active one) to `to`.
TRANSITION = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return nil end
if status ~= ARGV[1] and not (ARGV[1] == '*' and (status == 'queued' or status == 'running'))
then return status end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', ARGV[4])
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return ARGV[2]
"""

# KEYS[5]: chunks queued. ARGV: now, ttl, new deadline_at, job id. A job that ended with failed
# rows (or rows never run: enqueueing failed) forgets those rows' results and is queued again
# with its chunks that hold them; any other job is left as it is. {status, rows requeued,
# chunk...}; nil: the job is gone. Queue entries are "{job id}:{chunk}" (chunk_leases.member).
RETRY_FAILED = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return nil end
if status ~= 'completed_with_errors' and status ~= 'failed' then return {status, 0} end
local total = tonumber(redis.call('HGET', KEYS[1], 'total'))
local size = tonumber(redis.call('HGET', KEYS[1], 'chunk_size'))
local rows = redis.call('SMEMBERS', KEYS[3])
if redis.call('HLEN', KEYS[2]) < total then
  for i = 0, total - 1 do
    if redis.call('HEXISTS', KEYS[2], i) == 0 then table.insert(rows, tostring(i)) end
  end
end
if #rows == 0 then return {status, 0} end
local chunks = {}
for _, row in ipairs(rows) do
  redis.call('HDEL', KEYS[2], row)
  chunks[math.floor(tonumber(row) / size)] = true
end
redis.call('DEL', KEYS[3])
local out = {'queued', #rows}
for chunk, _ in pairs(chunks) do
  redis.call('ZADD', KEYS[5], ARGV[1], ARGV[4] .. ':' .. string.format('%d', chunk))
  table.insert(out, chunk)
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'updated_at', ARGV[1], 'deadline_at', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'retries', 1)
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[2]) end
return out
"""
