package redisstream

import "github.com/redis/go-redis/v9"

// Every script touches one destination's stream (KEYS[1]) and at most one
// key in the same hash slot (see sameSlotKey), so each is valid on Redis
// Cluster and atomic everywhere.

// publishScript appends an entry, at most once per digest within a window.
//
//	KEYS[1] stream, KEYS[2] (optional) the digest's key
//	ARGV[1] max entries (0: no limit), ARGV[2] window ms, ARGV[3..] fields
//
// When KEYS[2] holds the id of an entry this message already became, it
// returns that: the retry of a write whose reply was lost adds nothing.
// Else it refuses the write when the stream already holds ARGV[1] (> 0)
// entries, or XADDs the field/value pairs and remembers the id under the
// digest for the window. Returns {1, id}, {2, id} (deduplicated) or
// {0, entries} (full).
var publishScript = redis.NewScript(`
if KEYS[2] then
  local prev = redis.call('GET', KEYS[2])
  if prev then return {2, prev} end
end
local max = tonumber(ARGV[1])
if max > 0 then
  local n = redis.call('XLEN', KEYS[1])
  if n >= max then return {0, n} end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
if KEYS[2] then redis.call('SET', KEYS[2], id, 'PX', ARGV[2]) end
return {1, id}
`)

// fetchScript leases up to ARGV[5] entries for consumer ARGV[2] of group
// ARGV[1], oldest first, examining at most about ARGV[6] entries.
//
//	ARGV[3] park consumer, ARGV[4] lease (min-idle) ms, ARGV[7] cursor
//	("0-0" to start with the pending entries, "" to read only new ones),
//	ARGV[8] "1" when a filter follows from ARGV[9] on.
//
// Phase 1 takes over pending entries idle for at least the lease: those
// of crashed or slow consumers, released ones and ones parked by filtered
// reads. Unfiltered, that is XAUTOCLAIM; filtered, XPENDING IDLE, then
// XRANGE to test the entry's index fields, then XCLAIM of the matching
// ids only. Phase 2 reads new entries with XREADGROUP ">"; a filtered
// read parks the entries it does not take on the park consumer, idle for
// decades (so claimable at once) with their delivery count reset.
//
// Returns {cursor, more, id1, deliveries1, fields1, id2, ...}: cursor is
// where the next call resumes ("" once phase 1 is done), more is 1 when
// the examination budget ran out before the stream did.
var fetchScript = redis.NewScript(`
local s, g, me, park = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local lease = ARGV[4]
local want = tonumber(ARGV[5])
local budget = tonumber(ARGV[6])
local cursor = ARGV[7]

if redis.call('EXISTS', s) == 0 then return {'', 0} end
local created = redis.pcall('XGROUP', 'CREATE', s, g, '0')
if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP', 1, true) then
  return redis.error_reply(created.err)
end

local f = nil
if ARGV[8] == '1' then
  f = {}
  local i = 9
  while i <= #ARGV do
    local tag = ARGV[i]
    if tag == 'c' or tag == 's' or tag == 'e' or tag == 'i' or tag == 'r' then
      local n = tonumber(ARGV[i + 1])
      local set = {}
      for j = 1, n do set[ARGV[i + 1 + j]] = true end
      f[tag] = set
      i = i + 2 + n
    elseif tag == 'ge' or tag == 'lt' then
      f[tag] = {tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])}
      i = i + 3
    elseif tag == 'bb' then
      f.bb = {tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])}
      i = i + 5
    else
      return redis.error_reply('geodlq: unknown filter tag ' .. tostring(tag))
    end
  end
end

-- match mirrors broker.Filter.MatchRecord on the entry id and the index
-- fields Publish wrote (reason kinds are left to the caller).
local function match(id, fields)
  if f == nil then return true end
  if f.r and not f.r[id] then return false end
  if not (f.c or f.s or f.e or f.i or f.ge or f.lt or f.bb) then return true end
  local m = {}
  for i = 1, #fields, 2 do m[fields[i]] = fields[i + 1] end
  if m['env'] ~= '1' then return false end
  if f.c and not f.c[m['class']] then return false end
  if f.s and not f.s[m['stage']] then return false end
  if f.e and not f.e[m['epsg']] then return false end
  if f.i and not f.i[m['event_id']] then return false end
  if f.ge or f.lt then
    local ts, tn = tonumber(m['dlq_at_s']), tonumber(m['dlq_at_ns'])
    if ts == nil or tn == nil then return false end
    if f.ge and (ts < f.ge[1] or (ts == f.ge[1] and tn < f.ge[2])) then return false end
    if f.lt and not (ts < f.lt[1] or (ts == f.lt[1] and tn < f.lt[2])) then return false end
  end
  if f.bb then
    local x, y = tonumber(m['loc_x']), tonumber(m['loc_y'])
    if x == nil or y == nil then return false end
    if y < f.bb[2] or f.bb[4] < y then return false end
    if x < f.bb[1] or f.bb[3] < x then return false end
  end
  return true
end

local out = {'', 0}
local got = 0
local function add(id, n, fields)
  out[#out + 1] = id
  out[#out + 1] = n
  out[#out + 1] = fields
  got = got + 1
end

-- Phase 1: pending entries whose lease expired, oldest first.
while cursor ~= '' and got < want and budget > 0 do
  if f == nil then
    local n = want - got
    local r = redis.call('XAUTOCLAIM', s, g, me, lease, cursor, 'COUNT', n)
    budget = budget - n * 10 -- XAUTOCLAIM examines up to COUNT*10 entries
    for _, e in ipairs(r[2]) do
      if e[2] then
        local p = redis.call('XPENDING', s, g, e[1], e[1], 1)
        add(e[1], p[1][4], e[2])
      else
        redis.call('XACK', s, g, e[1]) -- deleted behind our back (Redis 6.2)
      end
    end
    cursor = r[1]
    if cursor == '0-0' then cursor = '' end
  else
    local start = '-'
    if cursor ~= '0-0' then start = '(' .. cursor end
    local batch = math.min(budget, 100)
    local p = redis.call('XPENDING', s, g, 'IDLE', lease, start, '+', batch)
    for _, e in ipairs(p) do
      local id = e[1]
      cursor = id
      budget = budget - 1
      local r = redis.call('XRANGE', s, id, id)
      if #r == 0 then
        redis.call('XACK', s, g, id) -- deleted behind our back: nothing to deliver
      elseif match(id, r[1][2]) then
        local c = redis.call('XCLAIM', s, g, me, lease, id)
        if #c > 0 then add(id, e[4] + 1, c[1][2]) end
      end
      if got >= want then break end
    end
    if #p < batch and got < want then cursor = '' end
  end
end

-- Phase 2: new entries.
local exhausted = false
if cursor == '' then
  local t = redis.call('TIME')
  local parked = tonumber(t[1]) * 1000 - 1
  while got < want and budget > 0 do
    local n = want - got
    if f ~= nil then n = math.min(budget, 100) end
    local r = redis.call('XREADGROUP', 'GROUP', g, me, 'COUNT', n, 'STREAMS', s, '>')
    if not r then exhausted = true break end
    local es = r[1][2]
    for _, e in ipairs(es) do
      budget = budget - 1
      if got < want and match(e[1], e[2]) then
        add(e[1], 1, e[2])
      else
        redis.call('XCLAIM', s, g, park, 0, e[1], 'IDLE', parked, 'RETRYCOUNT', 0, 'JUSTID')
      end
    end
    if #es < n then exhausted = true break end
  end
end

out[1] = cursor
if got < want and not exhausted and budget <= 0 then out[2] = 1 end
return out
`)

// settleScript acknowledges (ARGV[5] = "ack") or releases an entry, if
// the pending entry ARGV[2] of group ARGV[1] is still owned by consumer
// ARGV[3] with delivery count ARGV[4]; else it returns 0 (lease lost).
//
//	ack: XACK, then XDEL when ARGV[6] is "1".
//	release: XCLAIM to the park consumer ARGV[7], idle for decades so any
//	fetcher takes it over at once, keeping its delivery count.
//
// On success it leaves the call's nonce ARGV[8] in KEYS[2] for ARGV[9]
// ms, so that a retry of the same call (whose first attempt settled the
// entry but whose reply was lost) returns 1 instead of a false "lease
// lost"; another call's nonce differs, and it gets 0.
var settleScript = redis.NewScript(`
local function settled()
  if redis.call('GET', KEYS[2]) == ARGV[8] then return 1 end
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then return settled() end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if p.err then
  if string.find(p.err, 'NOGROUP', 1, true) then return settled() end
  return redis.error_reply(p.err)
end
if #p == 0 or p[1][2] ~= ARGV[3] or p[1][4] ~= tonumber(ARGV[4]) then return settled() end
if ARGV[5] == 'ack' then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  if ARGV[6] == '1' then redis.call('XDEL', KEYS[1], ARGV[2]) end
else
  local t = redis.call('TIME')
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[2], 'IDLE', tonumber(t[1]) * 1000 - 1, 'RETRYCOUNT', p[1][4], 'JUSTID')
end
redis.call('SET', KEYS[2], ARGV[8], 'PX', ARGV[9])
return 1
`)

// renewScript renews the lease of entry ARGV[2] of group ARGV[1]: if the
// entry is still pending for consumer ARGV[3] with delivery count ARGV[4],
// it resets the entry's idle time to zero (XCLAIM to the same consumer
// with JUSTID, which keeps the delivery count), so that no Fetch takes it
// over for another LeaseTTL, and returns 1; else 0 (lease lost).
var renewScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if p.err then
  if string.find(p.err, 'NOGROUP', 1, true) then return 0 end
  return redis.error_reply(p.err)
end
if #p == 0 or p[1][2] ~= ARGV[3] or p[1][4] ~= tonumber(ARGV[4]) then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
`)

// leaveScript removes consumer ARGV[2] from group ARGV[1] if it holds no
// pending entry (deleting a consumer drops its pending entries, which
// would then never be redelivered). Returns 1 when removed.
var leaveScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if p.err or #p > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// purgeScript deletes the entries ARGV[6..] of stream KEYS[1] that are
// still there and still deletable, and returns the ids it deleted. An
// entry is deletable when no live lease holds it (it is not pending in
// group ARGV[1] for a consumer other than the park consumer ARGV[2] with
// an idle time under ARGV[3] ms) and, unless ARGV[4] is "1", when it was
// acknowledged (not pending, and at or before the group's last-delivered
// id). A pending entry that is deleted is XACKed first, so that the
// group's pending list holds no id of a deleted entry. With ARGV[5] "1"
// nothing is deleted (a dry run's recheck).
//
// Selection by envelope fields happens in the client before; this script
// is the atomic part: between its checks and its XDEL no fetcher can take
// a lease and no settle can run.
var purgeScript = redis.NewScript(`
local s, g, park = KEYS[1], ARGV[1], ARGV[2]
local ttl = tonumber(ARGV[3])
local pending, dry = ARGV[4] == '1', ARGV[5] == '1'
local out = {}
if redis.call('EXISTS', s) == 0 then return out end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function after(a, b) -- a > b
  local am, as = parse(a)
  local bm, bs = parse(b)
  if am ~= bm then return am > bm end
  return as > bs
end

local last = nil -- the group's last-delivered id; nil: no group
local groups = redis.pcall('XINFO', 'GROUPS', s)
if not groups.err then
  for _, gi in ipairs(groups) do
    local m = {}
    for i = 1, #gi, 2 do m[gi[i]] = gi[i + 1] end
    if m['name'] == g then last = m['last-delivered-id'] end
  end
end

for i = 6, #ARGV do
  local id = ARGV[i]
  if #redis.call('XRANGE', s, id, id) > 0 then
    local p = {}
    if last then p = redis.call('XPENDING', s, g, id, id, 1) end
    local ok
    if #p > 0 then
      ok = pending and (p[1][2] == park or p[1][3] >= ttl)
    else
      ok = pending or (last ~= nil and not after(id, last))
    end
    if ok then
      if not dry then
        if #p > 0 then redis.call('XACK', s, g, id) end
        redis.call('XDEL', s, id)
      end
      out[#out + 1] = id
    end
  end
end
return out
`)
