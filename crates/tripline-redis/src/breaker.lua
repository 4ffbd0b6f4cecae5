#!lua name=tripline_6
-- tripline shared breaker: the rules of tripline's in-process breaker as a Redis 7 Functions
-- library. Loaded once per node (FUNCTION LOAD); every helper below is created at load time,
-- not per call. Each function runs atomically.
--
-- KEYS (one hash tag, so a Redis Cluster keeps them in one slot)
--   1 record    string: a MessagePack map of state, epoch, origin, open deadline, window totals,
--               probe leases. Never expires unless Closed (then an idle TTL, renewed lazily).
--   2 window    string: a count window's ring (one byte per outcome, then a sentinel byte), or
--               a time window's buckets (three u32 per bucket, then a u32 sentinel). May be
--               evicted: a missing sentinel means the window was lost, and says so.
--   3 inflight  hash: replica -> "epoch:count:until", calls in flight past the slow duration.
--   4 voters    sorted set: replica -> time of its last failure or slow call (the quorum
--               rule); votes older than the quorum window are trimmed, at most 10000 kept.
--   5 events    stream of transitions, capped.
--   6 config    hash: version -> configuration (comma-separated numbers, see FIELDS).
--
-- The failure-count-in-time rule keeps, in the record, the times of the epoch's last fcount
-- failures (field 'ft', oldest first, with 'fe' the epoch they belong to: a record written by a
-- release without the rule keeps them, and a new epoch makes them another epoch's).
--
-- ARGV (every function but tripline_6_config)
--   1 now in microseconds, or "" to use Redis TIME (clamped so it never goes backwards)
--   2 replica id
--   3 configuration version (a field of the config hash)
--   4 jitter of the next open wait, us
--   5 the replica's last view when it is not Closed, "origin:epoch:state:left" (state open or
--     forced-open, left: the open wait it saw left, us), or "": a record that cannot follow
--     from it (Closed, and started over or gone back) is brought back first, in this call
--   6.. the function's own arguments (numbered from 5 below: the view is taken off first)
--
-- Rates are compared in integers: failures * 1000000 >= threshold_ppm * calls.
-- Epochs: every transition but Open -> HalfOpen moves the epoch to max(epoch + 1, now), so a
-- record that a failover rolled back never reaches an epoch of the history it lost.
-- Reply: verdict, state, epoch, open deadline, now, expired leases, origin, notes (1: the
-- window was lost, 2: the record was missing, 4: the record started over at an operator's
-- action, 8: this call brought the caller's view back), 1 + the time the breaker closed when
-- its probes closed it (0 otherwise: where a ramp starts), the number n of the verdict's fields,
-- the n fields, then transitions as "from>to>reason>epoch".

local FIELDS = {
  'kind',    -- 0 count, 1 time
  'size',    -- ring size, or number of buckets
  'bucket',  -- bucket length (time window), us
  'min',     -- minimum calls (>= 1)
  'fppm',    -- failure-rate threshold, ppm
  'sppm',    -- slow-call-rate threshold, ppm
  'slow',    -- slow-call duration, us
  'consec',  -- consecutive failures, 0 = off
  'open',    -- open duration, us
  'mult',    -- backoff multiplier, 0 = no backoff
  'maxopen', -- backoff cap, us
  'healthy', -- backoff decays after this long Closed, us
  'maxhint', -- cap on a Retry-After hint, us
  'k',       -- half-open probes
  'policy',  -- 0 all probes, 1 consecutive
  'maxwait', -- half-open max wait, us, 0 = none
  'lease',   -- probe lease, us
  'auto',    -- automatic Open -> HalfOpen on tick, 0/1
  'idle',    -- idle TTL of a Closed record, ms
  'quorum',  -- distinct failing replicas needed to trip, 0 = off
  'qwithin', -- how recent a replica's failure must be to count, us
  'jitter',  -- the open wait's jitter range, us
  'amw',     -- where HalfOpen goes after its max wait: 0 Open, 1 Closed
  'fcount',  -- failure-count-in-time rule: failures that trip, 0 = off
  'fwithin', -- within this long, us
}
local MAX_VOTERS = 10000
local MAX_BATCH = 100000

-- Parsed configurations by version: a memo of the config hash, kept across calls (it is a pure
-- function of data stored in Redis), bounded.
local CACHE, CACHED = {}, 0

-- The state of the call being run (functions run one at a time).
local R, W, I, Q, E, C
local CFG, now, replica, jitter
local rec, dirty, trans
local fresh, st, ep, expired, notes, ttl_due, wrote_window
-- The call only reads (tripline_6_read): a missing record is answered, not created.
local readonly = false
local NO_TRANSITIONS = {}

-- Integers as decimal strings where Redis needs a string (numbers given to redis.call are
-- converted exactly by Redis itself).
local function fmt(n)
  return string.format('%.0f', n)
end

local function parse_cfg(s)
  local c, i = {}, 1
  for v in string.gmatch(s, '[^,]+') do
    local name = FIELDS[i]
    local n = tonumber(v)
    if name == nil or n == nil then
      return nil
    end
    c[name] = n
    i = i + 1
  end
  if i <= #FIELDS then
    return nil
  end
  return c
end

local function load_cfg(version)
  local c = CACHE[version]
  if c then
    return c
  end
  local s = redis.call('HGET', C, version)
  if not s then
    return nil
  end
  c = parse_cfg(s)
  if c then
    if CACHED >= 64 then
      CACHE, CACHED = {}, 0
    end
    CACHE[version] = c
    CACHED = CACHED + 1
  end
  return c
end

-- Record fields: the unpacked map, written back (packed) once, at the end, if changed.
local function getn(f)
  return rec[f]
end

local function geti(f)
  return rec[f] or 0
end

local function set(f, v)
  rec[f] = v
  dirty = true
end

local function unset(f)
  if rec[f] ~= nil then
    rec[f] = nil
    dirty = true
  end
end

-- The states a record may be in.
local STATES = {
  closed = true, open = true, ['half-open'] = true,
  ['forced-open'] = true, disabled = true, ['metrics-only'] = true,
}

-- The most probe slots a round may claim (half_open.permitted_calls is at most 1000): loops
-- over the slots run up to the record's 'lk'.
local MAX_SLOTS = 1000

-- The record's number fields: times in microseconds, epochs, counts and tokens, all whole
-- and in [0, 2^53]; the leases are 'lt<slot>' and 'ld<slot>'.
local NUMBERS = {
  ab = true, cf = true, cs = true, eo = true, ep = true, hs = true, lk = true, ln = true,
  lv = true, nse = true, o = true, ou = true, ox = true, rf = true, rr = true, rs = true,
  ru = true, tc = true, tf = true, th = true, tr = true, ts = true, wc = true, wf = true,
  wq = true, ws = true, wx = true, xa = true, fe = true,
}

-- The most failure times the failure-count rule keeps (failure_count.failures is at most 1000).
local MAX_FAILURE_TIMES = 1000

-- Whether an unpacked record is one this library can read: a map whose 'st' is a state,
-- whose 'wr' (the inline ring) is a string, whose number fields are whole numbers in
-- [0, 2^53] ('lk' at most MAX_SLOTS). Fields it does not know are left alone. Any other value
-- under the record's key (bytes that are not MessagePack, another program's value, a hand
-- edit) reads as a missing record, which starts over as one does after an eviction, rather
-- than failing every call or looping for seconds.
local function well_formed(r)
  if type(r) ~= 'table' then
    return false
  end
  for k, v in pairs(r) do
    if k == 'st' then
      if not STATES[v] then
        return false
      end
    elseif k == 'wr' then
      if type(v) ~= 'string' then
        return false
      end
    elseif k == 'ft' then
      if type(v) ~= 'table' or #v > MAX_FAILURE_TIMES then
        return false
      end
      for _, t in ipairs(v) do
        if type(t) ~= 'number' or not (t >= 0 and t <= 9007199254740992) then
          return false
        end
      end
    elseif type(k) == 'string' and (NUMBERS[k] or string.find(k, '^l[td]%d+$')) then
      if type(v) ~= 'number' or not (v >= 0 and v <= 9007199254740992) or v ~= math.floor(v) then
        return false
      end
      if k == 'lk' and v > MAX_SLOTS then
        return false
      end
    end
  end
  return true
end

-- Loads the call's state. False when the configuration version is unknown here.
local function begin(keys, args, ro)
  readonly = ro
  R, W, I, Q, E, C = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  CFG = load_cfg(args[3])
  if not CFG then
    return false
  end
  replica = args[2]
  jitter = tonumber(args[4]) or 0
  if args[1] == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(args[1])
  end
  dirty, trans = false, NO_TRANSITIONS
  expired, notes, ttl_due, wrote_window = 0, 0, false, false
  local raw = redis.call('GET', R)
  rec = {}
  if raw then
    local ok, r = pcall(cmsgpack.unpack, raw)
    if ok and well_formed(r) then
      rec = r
    end
  end
  fresh = rec.st == nil
  st = rec.st or 'closed'
  ep = geti('ep')
  local last = geti('ln')
  if now < last then
    now = last
  end
  if fresh then
    -- A missing record reads as Closed. Its epoch starts from the clock so that results of a
    -- lost record's permits cannot match it; the origin tells replicas it started over.
    ep = now
    if not readonly then
      redis.call('DEL', W, I, Q)
    end
    set('st', 'closed')
    set('ep', ep)
    set('o', ep)
    set('cs', now)
    notes = notes + 2
    ttl_due = true
  end
  return true
end

-- Windows ------------------------------------------------------------------------------------

-- Count window: ring bytes 1 + failure + 2 * slow (0: empty); the totals live in the record
-- (wc, wf, ws, wq = next slot). A ring of at most INLINE_RING outcomes lives in the record too
-- (field wr), so an exact call is one GET and one SET; a larger one has its own key, followed
-- by a sentinel byte that tells an evicted ring.
local INLINE_RING = 512

-- The record's ring, or a fresh one (then any totals left without it are dropped).
local function inline_ring()
  local n = CFG.size
  local r = rec.wr
  if r == nil or #r ~= n then
    r = string.rep('\0', n)
    if (rec.wc or 0) > 0 then
      rec.wc, rec.wf, rec.ws, rec.wq = 0, 0, 0, 0
      notes = notes + 1
    end
  end
  return r
end

local function count_add_inline(failure, slow)
  local n = CFG.size
  local r = inline_ring()
  local q = rec.wq or 0
  local slot = q % n
  local old = string.byte(r, slot + 1)
  local v = 1 + failure + 2 * slow
  if old ~= v then
    r = string.sub(r, 1, slot) .. string.char(v) .. string.sub(r, slot + 2)
  end
  rec.wr = r
  local c, f, s = rec.wc or 0, rec.wf or 0, rec.ws or 0
  if old ~= 0 then
    c = c - 1
    if old == 2 or old == 4 then
      f = f - 1
    end
    if old >= 3 then
      s = s - 1
    end
  end
  rec.wc, rec.wf, rec.ws, rec.wq = c + 1, f + failure, s + slow, (q + 1) % n
  dirty = true
  return old ~= 0
end

local function count_add(failure, slow)
  if CFG.size <= INLINE_RING then
    return count_add_inline(failure, slow)
  end
  -- The hot path of an exact call: fields read and written directly.
  local n = CFG.size
  local q = rec.wq or 0
  local slot = q % n
  local r = redis.call('BITFIELD', W, 'SET', 'u8', n * 8, 1, 'SET', 'u8', slot * 8, 1 + failure + 2 * slow)
  local c, f, s = rec.wc or 0, rec.wf or 0, rec.ws or 0
  local old = r[2]
  if r[1] == 0 and c > 0 then
    -- The ring was evicted or expired: its outcomes are gone.
    notes = notes + 1
    c, f, s = 0, 0, 0
    rec.wx = nil
  elseif old ~= 0 then
    c = c - 1
    if old == 2 or old == 4 then
      f = f - 1
    end
    if old >= 3 then
      s = s - 1
    end
  end
  rec.wc, rec.wf, rec.ws, rec.wq = c + 1, f + failure, s + slow, (q + 1) % n
  dirty = true
  wrote_window = true
  return old ~= 0
end

-- A batch of n outcomes works on the n ring slots it will write (one or two ranges, or the
-- whole ring), in memory, and writes them back once.
local ring, ring_ranges, ring_dirty = nil, {}, false
local function ring_load(n)
  local size = CFG.size
  if size <= INLINE_RING then
    ring = { string.byte(inline_ring(), 1, size) }
    ring_dirty = false
    return
  end
  if geti('wc') > 0 and redis.call('GETRANGE', W, size, size) == '' then
    notes = notes + 1
    set('wc', 0)
    set('wf', 0)
    set('ws', 0)
    set('wq', 0)
    unset('wx')
  end
  ring = {}
  ring_dirty = false
  local a = geti('wq') % size
  if n >= size then
    ring_ranges = { { 0, size - 1 } }
  elseif a + n - 1 < size then
    ring_ranges = { { a, a + n - 1 } }
  else
    ring_ranges = { { a, size - 1 }, { 0, a + n - 1 - size } }
  end
  for _, r in ipairs(ring_ranges) do
    local s = redis.call('GETRANGE', W, r[1], r[2])
    for i = 1, #s, 4096 do
      local part = { string.byte(s, i, math.min(i + 4095, #s)) }
      for j = 1, #part do
        ring[r[1] + i + j - 1] = part[j]
      end
    end
  end
end

local function ring_add(failure, slow)
  local n = CFG.size
  local q = geti('wq')
  local slot = q % n
  local old = ring[slot + 1] or 0
  local c, f, s = geti('wc'), geti('wf'), geti('ws')
  if old ~= 0 then
    local v = old - 1
    c = c - 1
    f = f - (v % 2)
    s = s - math.floor(v / 2)
  end
  ring[slot + 1] = 1 + failure + 2 * slow
  ring_dirty = true
  rec.wc, rec.wf, rec.ws, rec.wq = c + 1, f + failure, s + slow, (q + 1) % n
  dirty = true
  return old ~= 0
end

local function ring_store()
  if not (ring and ring_dirty) then
    ring = nil
    return
  end
  if CFG.size <= INLINE_RING then
    local bytes = {}
    for j = 1, CFG.size do
      bytes[j] = ring[j] or 0
    end
    rec.wr = string.char(unpack(bytes))
    dirty = true
    ring = nil
    return
  end
  for _, r in ipairs(ring_ranges) do
    local parts = {}
    for i = r[1] + 1, r[2] + 1, 4096 do
      local chunk = {}
      for j = i, math.min(i + 4095, r[2] + 1) do
        chunk[#chunk + 1] = ring[j] or 0
      end
      parts[#parts + 1] = string.char(unpack(chunk))
    end
    redis.call('SETRANGE', W, r[1], table.concat(parts))
  end
  redis.call('SETRANGE', W, CFG.size, '\1')
  ring = nil
  wrote_window = true
end

-- Time window: three u32 counters (calls, failures, slow) per bucket slot, big-endian, then a
-- u32 sentinel; the newest bucket (th) and the totals (tc, tf, ts) live in the record. Buckets
-- that left the window are cleared (their old values subtracted) once, when the clock enters a
-- new bucket; outcomes of one call are summed and written with one BITFIELD at the end.
--
-- Clearing is bounded whatever the gap: the slots that leave are read with at most two
-- GETRANGEs and zeroed with at most two SETRANGEs, and when more than half the ring leaves,
-- the totals are summed afresh from the slots that stay instead. So one call decodes at most
-- half the ring (2048 slots, 24 KB, at the 4096-bucket limit), in slices of SLICE bytes: no
-- argument list and no Lua stack grows with the gap.
local SLICE = 4092 -- 341 slots of 12 bytes

-- The sums of `len` slots from slot `a` (wrapping), and the byte ranges they cover.
local function slot_sums(a, len)
  local n = CFG.size
  local ranges
  if a + len <= n then
    ranges = { { a, len } }
  else
    ranges = { { a, n - a }, { 0, a + len - n } }
  end
  local c, f, s = 0, 0, 0
  for _, r in ipairs(ranges) do
    local bytes = redis.call('GETRANGE', W, 12 * r[1], 12 * (r[1] + r[2]) - 1)
    for i = 1, #bytes, SLICE do
      local b = { string.byte(bytes, i, math.min(i + SLICE - 1, #bytes)) }
      for k = 1, #b - 11, 12 do
        c = c + ((b[k] * 256 + b[k + 1]) * 256 + b[k + 2]) * 256 + b[k + 3]
        f = f + ((b[k + 4] * 256 + b[k + 5]) * 256 + b[k + 6]) * 256 + b[k + 7]
        s = s + ((b[k + 8] * 256 + b[k + 9]) * 256 + b[k + 10]) * 256 + b[k + 11]
      end
    end
  end
  return c, f, s, ranges
end

local tw_cur, tw_add_c, tw_add_f, tw_add_s = nil, 0, 0, 0
local function tw_rotate()
  if tw_cur then
    return
  end
  tw_add_c, tw_add_f, tw_add_s = 0, 0, 0
  local cur = math.floor(now / CFG.bucket)
  tw_cur = cur
  local h = getn('th')
  if h == nil or cur <= h then
    if h == nil then
      set('th', cur)
    end
    return
  end
  local n = CFG.size
  if cur - h >= n or geti('tc') == 0 then
    if geti('tc') > 0 or redis.call('EXISTS', W) == 1 then
      redis.call('DEL', W)
      unset('wx')
    end
    set('tc', 0)
    set('tf', 0)
    set('ts', 0)
  elseif redis.call('GETRANGE', W, 12 * n, 12 * n + 3) == '' then
    -- No sentinel: the buckets were evicted or expired.
    notes = notes + 1
    set('tc', 0)
    set('tf', 0)
    set('ts', 0)
    unset('wx')
  else
    -- Buckets h+1 .. cur reuse the slots of the g buckets leaving the window.
    local g = cur - h
    local leaving = (h + 1) % n
    local c, f, s, ranges
    if g <= n - g then
      c, f, s, ranges = slot_sums(leaving, g)
      c, f, s = geti('tc') - c, geti('tf') - f, geti('ts') - s
    else
      c, f, s = slot_sums((cur + 1) % n, n - g)
      if leaving + g <= n then
        ranges = { { leaving, g } }
      else
        ranges = { { leaving, n - leaving }, { 0, leaving + g - n } }
      end
    end
    for _, r in ipairs(ranges) do
      redis.call('SETRANGE', W, 12 * r[1], string.rep('\0', 12 * r[2]))
    end
    set('tc', c)
    set('tf', f)
    set('ts', s)
    wrote_window = true
  end
  set('th', cur)
end

local function tw_add(failure, slow)
  tw_rotate()
  tw_add_c = tw_add_c + 1
  tw_add_f = tw_add_f + failure
  tw_add_s = tw_add_s + slow
  set('tc', geti('tc') + 1)
  set('tf', geti('tf') + failure)
  set('ts', geti('ts') + slow)
end

local function tw_save()
  if not tw_cur then
    return
  end
  if tw_add_c > 0 then
    local n = CFG.size
    local slot = tw_cur % n
    local cmd = { 'OVERFLOW', 'SAT', 'SET', 'u32', 96 * n, 1, 'INCRBY', 'u32', 96 * slot, tw_add_c }
    if tw_add_f > 0 then
      cmd[#cmd + 1], cmd[#cmd + 2], cmd[#cmd + 3], cmd[#cmd + 4] = 'INCRBY', 'u32', 96 * slot + 32, tw_add_f
    end
    if tw_add_s > 0 then
      cmd[#cmd + 1], cmd[#cmd + 2], cmd[#cmd + 3], cmd[#cmd + 4] = 'INCRBY', 'u32', 96 * slot + 64, tw_add_s
    end
    local r = redis.call('BITFIELD', W, unpack(cmd))
    if r[1] == 0 and geti('tc') > tw_add_c then
      -- The buckets were evicted: only this call's outcomes are left.
      notes = notes + 1
      set('tc', tw_add_c)
      set('tf', tw_add_f)
      set('ts', tw_add_s)
      unset('wx')
    end
    wrote_window = true
  end
  tw_cur = nil
end

local function window()
  if CFG.kind == 0 then
    return geti('wc'), geti('wf'), geti('ws')
  end
  tw_rotate()
  return geti('tc'), geti('tf'), geti('ts')
end

-- Adds an outcome; returns whether it replaced one (a count window's full ring).
local function window_add(failure, slow)
  if CFG.kind == 1 then
    tw_add(failure, slow)
    return false
  elseif ring then
    return ring_add(failure, slow)
  end
  return count_add(failure, slow)
end

local function window_reset()
  redis.call('DEL', W, I, Q)
  ring, ring_dirty, tw_cur = nil, false, nil
  for _, f in ipairs({ 'wc', 'wf', 'ws', 'wq', 'wr', 'tc', 'tf', 'ts', 'th', 'cf', 'wx', 'ab', 'nse', 'ft', 'fe' }) do
    unset(f)
  end
end

-- Calls in flight past the slow duration, reported by each replica for the current epoch.
local function in_flight_slow()
  local flat = redis.call('HGETALL', I)
  local n = 0
  for i = 1, #flat, 2 do
    local e, c, u = string.match(flat[i + 1], '^(%d+):(%d+):(%d+)$')
    if tonumber(e) == ep and tonumber(u) > now then
      n = n + tonumber(c)
    else
      redis.call('HDEL', I, flat[i])
    end
  end
  return n
end

-- The quorum's votes: trimmed to the quorum window and to MAX_VOTERS on every use.
local function trim_votes()
  redis.call('ZREMRANGEBYSCORE', Q, '-inf', fmt(now - CFG.qwithin))
end

local function vote()
  if redis.call('ZADD', Q, now, replica) == 1 then
    local n = redis.call('ZCARD', Q)
    if n > MAX_VOTERS then
      redis.call('ZREMRANGEBYRANK', Q, 0, n - MAX_VOTERS - 1)
    end
  end
  trim_votes()
  redis.call('PEXPIRE', Q, math.ceil(CFG.qwithin / 1000) + 1000)
end

-- A replica's report of its calls in flight past the slow duration: "epoch:count", or "-1" for
-- none. A count of another epoch, or zero, clears the replica's entry. Returns whether a report
-- came.
local function report_in_flight(report)
  if report == '-1' then
    return false
  end
  local e, count = string.match(report or '', '^(%d+):(%d+)$')
  if e == nil then
    return false
  end
  count = tonumber(count)
  if tonumber(e) ~= ep or count == 0 then
    redis.call('HDEL', I, replica)
  else
    redis.call('HSET', I, replica, fmt(ep) .. ':' .. fmt(count) .. ':' .. fmt(now + 2 * CFG.slow))
    redis.call('PEXPIRE', I, math.ceil(2 * CFG.slow / 1000) + 1)
    if CFG.quorum > 1 then
      -- Calls past the slow-call duration are slow calls of this replica: its vote.
      vote()
    end
  end
  return true
end

local function quorum_met()
  if CFG.quorum <= 1 then
    return true
  end
  trim_votes()
  return redis.call('ZCARD', Q) >= CFG.quorum
end

-- Transitions --------------------------------------------------------------------------------

-- As in-process: with backoff, no wait exceeds the backoff cap, jitter and hints included; a
-- grown wait is capped at cap - jitter range (but not below the base wait), so the jitter still
-- spreads replicas at the cap.
local function open_wait(hint)
  local wait = CFG.open
  local lv = geti('lv')
  if CFG.mult > 0 then
    local room = math.max(CFG.maxopen - CFG.jitter, CFG.open)
    local grown = CFG.open * CFG.mult ^ math.min(lv, 1000)
    if grown < room then
      wait = math.floor(grown)
    else
      wait = room
    end
  end
  wait = wait + jitter
  if hint and hint > 0 then
    wait = math.max(wait, math.min(hint, CFG.maxhint))
  end
  if CFG.mult > 0 then
    wait = math.min(wait, CFG.maxopen)
  end
  return wait
end

-- Probe slots run 0 .. k - 1; a round that began under a larger k (a rolling reconfiguration)
-- may still hold leases above it, so every loop over the leases runs up to the highest slot
-- the round claimed (field lk).
local function slot_bound()
  return math.max(CFG.k, geti('lk'))
end

local function clear_round()
  for i = 0, slot_bound() - 1 do
    if getn('lt' .. i) then
      unset('lt' .. i)
      unset('ld' .. i)
    end
  end
  for _, f in ipairs({ 'rr', 'rf', 'rs', 'ru', 'lk' }) do
    unset(f)
  end
end

local function event(from, to, reason)
  redis.call('XADD', E, 'MAXLEN', '~', 1000, '*', 'from', from, 'to', to, 'epoch', fmt(ep), 'reason', reason, 'at', fmt(now), 'replica', replica)
  -- The events stream outlives no idle breaker.
  redis.call('PEXPIRE', E, CFG.idle)
  if trans == NO_TRANSITIONS then
    trans = {}
  end
  trans[#trans + 1] = from .. '>' .. to .. '>' .. reason .. '>' .. fmt(ep)
end

-- The epoch after a transition: later than the last, and never below the clock, so that a
-- record rolled back by a failover (the same origin, an older epoch) moves on to epochs the
-- history it lost never had (that history's epochs were all taken before the failover).
local function next_epoch(e)
  return math.max(e + 1, now)
end

-- `exact`: an operator's open wait (us), which takes no jitter and leaves the backoff alone.
local function transition(to, reason, hint, exact)
  local from = st
  if not (from == 'open' and to == 'half-open') then
    ep = next_epoch(ep)
    set('ep', ep)
  end
  if to == 'open' then
    if exact then
      set('ou', now + exact)
    else
      if from == 'half-open' then
        set('lv', geti('lv') + 1)
      elseif geti('eo') == 0 or now - geti('cs') >= CFG.healthy then
        set('lv', 0)
      else
        set('lv', geti('lv') + 1)
      end
      set('ou', now + open_wait(hint))
    end
    set('eo', 1)
  elseif to == 'half-open' then
    set('hs', now)
  elseif to == 'closed' or to == 'metrics-only' then
    window_reset()
    set('cs', now)
  end
  -- A close by the probes is where a ramp (kept by each replica) starts.
  if to == 'closed' and reason == 'probes-succeeded' then
    set('rp', 1)
  else
    unset('rp')
  end
  if to == 'half-open' or from == 'half-open' then
    clear_round()
  end
  if to == 'closed' then
    ttl_due = true
  end
  st = to
  set('st', to)
  set('tr', geti('tr') + 1)
  event(from, to, reason)
end

-- Where HalfOpen goes when half_open.max_wait passes without a verdict.
local function after_max_wait()
  if CFG.amw == 1 then
    return 'closed'
  end
  return 'open'
end

-- The failure-count-in-time rule: adds `w` failures at now to the epoch's failure times, keeps
-- the last fcount of them that are at most fwithin old (a time exactly fwithin old counts, as
-- in-process), and returns whether they reach fcount.
local function count_failure(w)
  if CFG.fcount <= 0 then
    return false
  end
  local times = rec.ft
  if rec.fe ~= ep or type(times) ~= 'table' then
    times = {}
  end
  local kept = {}
  for _, t in ipairs(times) do
    if now - t <= CFG.fwithin then
      kept[#kept + 1] = t
    end
  end
  for _ = 1, w do
    kept[#kept + 1] = now
  end
  local drop = #kept - CFG.fcount
  if drop > 0 then
    local last = {}
    for i = drop + 1, #kept do
      last[#last + 1] = kept[i]
    end
    kept = last
  end
  set('ft', kept)
  if rec.fe ~= ep then
    set('fe', ep)
  end
  return #kept >= CFG.fcount
end

-- The trip rules. Returns a reason or nil. Every evaluation notes whether the window held
-- minimum_calls ('ab': at or above), for the time window's success gate.
local function trip_reason(consecutive, with_in_flight, counted)
  if consecutive then
    return 'consecutive-failures'
  end
  if counted then
    return 'failure-count'
  end
  local c, f, s = window()
  local min = CFG.min
  if CFG.kind == 1 then
    local above = 0
    if c >= min then
      above = 1
    end
    if rec.ab ~= above then
      set('ab', above)
    end
  end
  if c >= min and f * 1000000 >= CFG.fppm * c then
    return 'failure-rate'
  end
  local inf = 0
  if with_in_flight then
    inf = in_flight_slow()
  end
  local total = c + inf
  if total >= min and (s + inf) * 1000000 >= CFG.sppm * total then
    return 'slow-call-rate'
  end
  return nil
end

local function try_trip(consecutive, with_in_flight, hint, counted)
  local reason = trip_reason(consecutive, with_in_flight, counted)
  if reason and (CFG.quorum <= 1 or quorum_met()) then
    transition('open', reason, hint)
    return true
  end
  return false
end

-- Half-open probes ---------------------------------------------------------------------------

local function leases()
  local live, soonest = 0, nil
  for i = 0, slot_bound() - 1 do
    local d = getn('ld' .. i)
    if d then
      live = live + 1
      if soonest == nil or d - now < soonest then
        soonest = d - now
      end
    end
  end
  return live, soonest
end

-- Claims a probe slot for the caller's token, unless the caller has given up already (its
-- deadline, in the script's clock, has passed): a claim nobody will use is never made.
local function claim(token, deadline)
  if CFG.maxwait > 0 and now >= geti('hs') + CFG.maxwait then
    transition(after_max_wait(), 'half-open-timeout')
    return nil
  end
  for i = 0, slot_bound() - 1 do
    local d = getn('ld' .. i)
    if d and d <= now then
      unset('lt' .. i)
      unset('ld' .. i)
      expired = expired + 1
    end
  end
  local settled = geti('rr')
  if CFG.policy == 1 then
    settled = geti('ru')
  end
  if settled >= CFG.k then
    -- A round begun under a larger k (a rolling reconfiguration) already has the results this
    -- configuration asks for: decide it now by this configuration's rule (no probe could).
    local rr, rf, rs = geti('rr'), geti('rf'), geti('rs')
    if CFG.policy == 0 and (rf * 1000000 >= CFG.fppm * rr or rs * 1000000 >= CFG.sppm * rr) then
      transition('open', 'probes-failed')
    else
      transition('closed', 'probes-succeeded')
    end
    return nil
  end
  local live, soonest = leases()
  if live + settled < CFG.k then
    if deadline > 0 and now >= deadline then
      return { 'late' }
    end
    for i = 0, CFG.k - 1 do
      if not getn('ld' .. i) then
        set('lt' .. i, token)
        set('ld' .. i, now + CFG.lease)
        if i + 1 > geti('lk') then
          set('lk', i + 1)
        end
        return { 'probe', i, token }
      end
    end
  end
  -- Also when the maximum half-open wait ends the round, so that a replica holding this
  -- rejection asks again by then.
  local change = -1
  if CFG.maxwait > 0 then
    change = geti('hs') + CFG.maxwait - now
  end
  return { 'reject', soonest or -1, change }
end

-- Operations ---------------------------------------------------------------------------------

-- ARGV[5] in-flight report, [6] the caller's probe token, [7] the caller's deadline (us in the
-- script's clock, 0 = none).
local function admit(args)
  local report = args[5]
  local token = tonumber(args[6]) or 0
  local deadline = tonumber(args[7]) or 0
  for _ = 1, 4 do
    if st == 'closed' or st == 'metrics-only' then
      -- A report is the replica's periodic in-flight check: evaluate every rule with the
      -- fleet's count (tripped: loop to the Open answer).
      if not (st == 'closed' and report_in_flight(report) and try_trip(false, true)) then
        return { 'permit' }
      end
    elseif st == 'open' then
      local ou = geti('ou')
      if now < ou then
        return { 'reject', ou - now }
      end
      transition('half-open', 'open-elapsed')
    elseif st == 'half-open' then
      local r = claim(token, deadline)
      if r then
        return r
      end
    elseif st == 'disabled' then
      return { 'pass' }
    else
      return { 'reject', -1 }
    end
  end
  return { 'reject', -1 }
end

-- `weight`: a failure of a kind that weighs n (failure_kinds) counts as n outcomes in the window
-- and n in the run of consecutive failures (a kind weighing 0 arrives as ignored).
local function record_window(epoch, outcome, slow, hint, weight)
  if epoch ~= ep then
    return 'stale'
  end
  if outcome == 'i' then
    return 'ignored'
  end
  local failure = 0
  if outcome == 'f' then
    failure = 1
  end
  local w = 1
  if failure == 1 and weight and weight > 1 then
    w = math.min(weight, 10)
  end
  local replaced
  if CFG.kind == 0 and not ring then
    replaced = count_add(failure, slow)
  else
    replaced = window_add(failure, slow)
  end
  for _ = 2, w do
    if CFG.kind == 0 and not ring then
      count_add(failure, slow)
    else
      window_add(failure, slow)
    end
  end
  local consecutive = false
  if CFG.consec > 0 then
    if failure == 1 then
      local n = geti('cf') + w
      set('cf', n)
      consecutive = n >= CFG.consec
    elseif geti('cf') ~= 0 then
      set('cf', 0)
    end
  end
  local counted = false
  if failure == 1 then
    counted = count_failure(w)
  end
  if (failure == 1 or slow == 1) and CFG.quorum > 1 then
    vote()
  end
  if st == 'closed' then
    -- As in-process: failures, slow calls and a consecutive run always evaluate; a fast
    -- success evaluates a count window always (over a full ring it cannot raise a rate), a
    -- time window when the last evaluation found the window below minimum_calls, or when the
    -- clock has entered a new bucket since the last success evaluated.
    local evaluate = failure == 1 or slow == 1 or consecutive
    if CFG.kind == 0 then
      -- Over a full ring a success replaced an outcome: it cannot raise either rate.
      evaluate = evaluate or not replaced
    elseif not evaluate and (rec.ab ~= 1 or now >= (rec.nse or 0)) then
      set('nse', (math.floor(now / CFG.bucket) + 1) * CFG.bucket)
      evaluate = true
    end
    if evaluate then
      try_trip(consecutive, failure == 1 or slow == 1, hint, counted)
    end
  end
  return 'counted'
end

-- A result's epoch argument, "epoch/origin" (or a bare epoch): the epoch when the origin is
-- this record's, else -1, which matches no epoch. A record that replaced a lost one starts from
-- the clock and may reach an epoch the lost one had; it never has the lost one's origin too.
local function permit_epoch(a)
  local e, o = string.match(a or '', '^(%d+)/(%d+)$')
  if e == nil then
    return tonumber(a)
  end
  if tonumber(o) ~= geti('o') then
    return -1
  end
  return tonumber(e)
end

-- ARGV[5] epoch/origin, [6] outcome (s, f, i), [7] slow (0/1), [8] in-flight report
-- ("epoch:count" or -1), [9] Retry-After hint in us (0 = none), [10] a failure's weight (1 to
-- 10; absent: 1).
local function record(args)
  report_in_flight(args[8])
  local verdict = record_window(permit_epoch(args[5]), args[6], tonumber(args[7]), tonumber(args[9]),
    tonumber(args[10]))
  return { verdict }
end

-- ARGV[5] epoch/origin, [6] outcomes: one character per call, oldest first: s f i (fast) or
-- S F I (slow), or a failure weighing w in 2..10 (failure_kinds): the byte 48 + w ('2' .. ':')
-- fast, 58 + w (';' .. 'D') slow; [7] in-flight report ("epoch:count" or -1).
local function batch(args)
  local epoch = permit_epoch(args[5])
  local outcomes = args[6]
  if #outcomes > MAX_BATCH then
    return redis.error_reply('tripline: a batch holds at most ' .. MAX_BATCH .. ' outcomes')
  end
  report_in_flight(args[7])
  if CFG.kind == 0 and epoch == ep then
    -- The slots the batch may write: one per outcome, w for a failure weighing w.
    local slots = #outcomes
    for from = 1, #outcomes, 4096 do
      local codes = { string.byte(outcomes, from, math.min(from + 4095, #outcomes)) }
      for j = 1, #codes do
        local ch = codes[j]
        if ch >= 50 and ch <= 58 then
          slots = slots + ch - 49
        elseif ch >= 59 and ch <= 68 then
          slots = slots + ch - 59
        end
      end
    end
    ring_load(slots)
  end
  local counted, stale, ignored = 0, 0, 0
  local n = #outcomes
  local size = CFG.size
  local fast = CFG.kind == 0 and ring ~= nil and CFG.consec == 0 and CFG.quorum <= 1
  for from = 1, n, 4096 do
    local codes = { string.byte(outcomes, from, math.min(from + 4095, n)) }
    for j = 1, #codes do
      if epoch ~= ep then
        -- A transition (the trip) ended the epoch: every later outcome is stale.
        stale = stale + n - (from + j - 1) + 1
        return { 'batch', counted, stale, ignored }
      end
      local ch = codes[j]
      local slow = 0
      local weight = 1
      if ch >= 50 and ch <= 68 then
        -- A weighted failure.
        if ch <= 58 then
          weight = ch - 48
        else
          weight = ch - 58
          slow = 1
        end
        ch = 102
      elseif ch < 97 then
        -- S F I: slow
        slow = 1
        ch = ch + 32
      end
      local r
      if fast and ch == 115 and slow == 0 and st == 'closed' then
        -- A fast success on a count window, without the consecutive or quorum rules: what
        -- record_window does, inline (the common case of a healthy replica's batch).
        local q = rec.wq or 0
        local slot = q % size
        local old = ring[slot + 1] or 0
        ring[slot + 1] = 1
        ring_dirty = true
        local c, f, sl = rec.wc or 0, rec.wf or 0, rec.ws or 0
        if old ~= 0 then
          c = c - 1
          if old == 2 or old == 4 then
            f = f - 1
          end
          if old >= 3 then
            sl = sl - 1
          end
        end
        rec.wc, rec.wf, rec.ws, rec.wq = c + 1, f, sl, (q + 1) % size
        dirty = true
        if old == 0 then
          -- The ring is still filling: this success may bring it to minimum_calls.
          try_trip(false, false, 0)
        end
        r = 'counted'
      elseif ch == 102 then
        r = record_window(epoch, 'f', slow, 0, weight)
      elseif ch == 115 then
        r = record_window(epoch, 's', slow, 0)
      else
        r = record_window(epoch, 'i', slow, 0)
      end
      if r == 'counted' then
        counted = counted + 1
      elseif r == 'stale' then
        stale = stale + 1
      else
        ignored = ignored + 1
      end
    end
  end
  return { 'batch', counted, stale, ignored }
end

-- ARGV[5] epoch, [6] slot, [7] token, [8] outcome, [9] slow, [10] hint us. A probe's result
-- counts while its lease is held: until it is released, or reclaimed by an acquire after its
-- deadline (as in-process).
local function probe(args)
  local epoch = tonumber(args[5])
  local slot = args[6]
  local token = tonumber(args[7])
  if epoch ~= ep or st ~= 'half-open' or getn('lt' .. slot) ~= token then
    return { 'stale' }
  end
  unset('lt' .. slot)
  unset('ld' .. slot)
  local outcome = args[8]
  if outcome == 'i' then
    return { 'ignored' }
  end
  local failure = 0
  if outcome == 'f' then
    failure = 1
  end
  local slow = tonumber(args[9])
  local rr = geti('rr') + 1
  local rf = geti('rf') + failure
  local rs = geti('rs') + slow
  local ru = geti('ru')
  if failure == 0 and slow == 0 then
    ru = ru + 1
  end
  set('rr', rr)
  set('rf', rf)
  set('rs', rs)
  set('ru', ru)
  local to = nil
  if CFG.policy == 0 then
    if rf * 1000000 >= CFG.fppm * CFG.k or rs * 1000000 >= CFG.sppm * CFG.k then
      to = 'open'
    elseif rr >= CFG.k then
      to = 'closed'
    end
  else
    if failure == 1 or slow == 1 then
      to = 'open'
    elseif ru >= CFG.k then
      to = 'closed'
    end
  end
  if to == 'open' then
    transition('open', 'probes-failed', tonumber(args[10]))
  elseif to == 'closed' then
    transition('closed', 'probes-succeeded')
  end
  return { 'counted' }
end

-- ARGV[5] epoch (0 = any), [6] slot (-1 = any), [7] token. Releases the lease holding the token
-- (tokens are chosen at random by the replicas, so any slot can be searched).
local function release(args)
  local epoch, slot, token = tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  if st == 'half-open' and (epoch == 0 or epoch == ep) then
    for i = 0, slot_bound() - 1 do
      if (slot < 0 or slot == i) and getn('lt' .. i) == token then
        unset('lt' .. i)
        unset('ld' .. i)
        return { 'released' }
      end
    end
  end
  return { 'stale' }
end

local function tick()
  if st == 'open' and CFG.auto == 1 and now >= geti('ou') then
    transition('half-open', 'open-elapsed')
  elseif st == 'half-open' and CFG.maxwait > 0 and now >= geti('hs') + CFG.maxwait then
    transition(after_max_wait(), 'half-open-timeout')
  end
  return { 'ok' }
end

-- ARGV[5] target state, [6] for Open, the wait in us (absent or -1: the configured open wait,
-- jitter and backoff included). The operator's edges are the in-process breaker's: HalfOpen
-- only from Open, HalfOpen or ForcedOpen (refused from elsewhere); asking for the state the
-- breaker is in does nothing, except that Closed starts a fresh window and Open a new wait.
local function operator(args)
  local to = args[5]
  local wait = tonumber(args[6]) or -1
  if to == 'half-open' and (st == 'closed' or st == 'disabled' or st == 'metrics-only') then
    return { 'refused' }
  end
  if fresh then
    -- The record was missing (lost) and starts over at an operator's word: replicas that
    -- remember the lost record Open take this one as it is (reply note 4) instead of restoring.
    set('ox', 1)
  end
  if st ~= to or to == 'closed' or to == 'open' then
    local exact = nil
    if to == 'open' and wait >= 0 then
      exact = wait
    end
    transition(to, 'operator', nil, exact)
  end
  return { 'ok' }
end

-- Brings a replica's view (origin, epoch, state 'open' or 'forced-open', the open wait it saw
-- left) back over a Closed record that cannot follow from it: one that started over (another
-- origin, not at an operator's word) or went back (the same origin, an older epoch): an
-- eviction, a restart without persistence, a failover that lost writes. A record that follows
-- from the view is left alone. Returns whether it brought the view back.
local function bring_back(origin, epoch, to, left)
  if st ~= 'closed' or (to ~= 'open' and to ~= 'forced-open') then
    return false
  end
  local o = geti('o')
  local started_over = o ~= origin and rec.ox ~= 1
  local went_back = o == origin and ep < epoch
  if not (started_over or went_back) then
    return false
  end
  local from = st
  ep = next_epoch(math.max(ep, epoch))
  set('ep', ep)
  set('o', origin)
  unset('ox')
  if to == 'open' then
    set('ou', now + math.max(left, 0))
    set('eo', 1)
  end
  unset('rp')
  st = to
  set('st', to)
  set('tr', geti('tr') + 1)
  event(from, to, 'restored')
  return true
end

-- ARGV[5] origin, [6] epoch and [7] state ('open' or 'forced-open') of a replica's last view,
-- [8] for Open, the time left of its wait (us). The explicit form of what ARGV[5] of every
-- call asks (see bring_back): brought back over a Closed record only, once.
local function restore(args)
  local to = args[7]
  if to ~= 'open' and to ~= 'forced-open' then
    return redis.error_reply('tripline: restore to ' .. tostring(to))
  end
  if bring_back(tonumber(args[5]), tonumber(args[6]), to, tonumber(args[8]) or 0) then
    return { 'restored' }
  end
  return { 'current' }
end

-- Whether a count window's ring is still there (a read has no write to find out with).
local function count_check()
  if CFG.kind == 0 and CFG.size > INLINE_RING and geti('wc') > 0
    and redis.call('GETRANGE', W, CFG.size, CFG.size) == '' then
    notes = notes + 1
    for _, f in ipairs({ 'wc', 'wf', 'ws', 'wq', 'wx' }) do
      unset(f)
    end
  end
end

local function read()
  if fresh then
    -- Nothing to read, and a read creates nothing (the keys a lost record left are removed
    -- by the next call that writes).
    return { 'read', 0, 0, 0, 0, 0, 0 }
  end
  count_check()
  local c, f, s = window()
  local live = leases()
  return { 'read', c, f, s, in_flight_slow(), live, geti('tr') }
end

-- Writes back what changed; a record that is not Closed never expires (a plain SET drops any
-- TTL), a Closed one has its idle TTL (renewed when an eighth of it has passed); then the reply.
local answer

local function finish(reply)
  if readonly and fresh then
    return answer(reply)
  end
  ring_store()
  tw_save()
  local live = st == 'closed' or st == 'metrics-only'
  if live and (ttl_due or now - geti('xa') >= CFG.idle * 125) then
    ttl_due = true
    set('xa', now)
  end
  if wrote_window and rec.wx ~= 1 then
    set('wx', 1)
    redis.call('PEXPIRE', W, CFG.idle)
  end
  if dirty then
    rec.ln = now
    if st ~= 'closed' then
      redis.call('SET', R, cmsgpack.pack(rec))
    elseif ttl_due then
      redis.call('SET', R, cmsgpack.pack(rec), 'PX', CFG.idle)
    else
      redis.call('SET', R, cmsgpack.pack(rec), 'KEEPTTL')
    end
  elseif st == 'closed' and ttl_due then
    redis.call('PEXPIRE', R, CFG.idle)
  end
  if live and ttl_due then
    redis.call('PEXPIRE', W, CFG.idle)
    redis.call('PEXPIRE', C, CFG.idle)
  end
  return answer(reply)
end

-- The reply: the header, the verdict's fields, the transitions.
answer = function(reply)
  local nr = #reply
  if rec.ox then
    notes = notes + 4
  end
  local ramp = 0
  if st == 'closed' and rec.rp == 1 then
    ramp = (rec.cs or 0) + 1
  end
  local out = { reply[1], st, ep, rec.ou or 0, now, expired, rec.o or 0, notes, ramp, nr - 1 }
  if nr > 1 or #trans > 0 then
    for i = 2, nr do
      out[#out + 1] = reply[i]
    end
    for i = 1, #trans do
      out[#out + 1] = trans[i]
    end
  end
  return out
end

-- ARGV[5] of every call: the caller's view, brought back first if Redis lost it.
local function assert_view(view)
  local o, e, to, left = string.match(view, '^(%d+):(%d+):([%a-]+):(%d+)$')
  if o == nil then
    return
  end
  if bring_back(tonumber(o), tonumber(e), to, tonumber(left)) then
    notes = notes + 8
    if readonly then
      -- A read that brings the view back writes it.
      readonly = false
      if fresh then
        redis.call('DEL', W, I, Q)
      end
    end
  end
end

local function entry(op, ro)
  return function(keys, args)
    local view = ''
    if #args >= 5 then
      view = table.remove(args, 5)
    end
    if not begin(keys, args, ro == true) then
      return { 'config' }
    end
    if view ~= '' then
      assert_view(view)
    end
    local reply = op(args)
    if reply.err then
      return reply
    end
    return finish(reply)
  end
end

-- ARGV[1] version, [2] configuration, [3] idle TTL of the config hash, ms.
local function config(keys, args)
  local c = parse_cfg(args[2])
  if not c then
    return redis.error_reply('tripline: malformed configuration ' .. args[2])
  end
  local C = keys[6]
  if redis.call('HLEN', C) >= 16 then
    -- Old versions of a rolling deploy: the replicas still using one store it again.
    redis.call('DEL', C)
  end
  redis.call('HSET', C, args[1], args[2])
  redis.call('PEXPIRE', C, args[3])
  if CACHED >= 64 then
    CACHE, CACHED = {}, 0
  end
  CACHE[args[1]] = c
  CACHED = CACHED + 1
  return { 'config' }
end

local OOM = { 'allow-oom' }
redis.register_function { function_name = 'tripline_6_admit', callback = entry(admit), flags = OOM }
redis.register_function { function_name = 'tripline_6_record', callback = entry(record), flags = OOM }
redis.register_function { function_name = 'tripline_6_batch', callback = entry(batch), flags = OOM }
redis.register_function { function_name = 'tripline_6_probe', callback = entry(probe), flags = OOM }
redis.register_function { function_name = 'tripline_6_release', callback = entry(release), flags = OOM }
redis.register_function { function_name = 'tripline_6_tick', callback = entry(tick), flags = OOM }
redis.register_function { function_name = 'tripline_6_operator', callback = entry(operator), flags = OOM }
redis.register_function { function_name = 'tripline_6_restore', callback = entry(restore), flags = OOM }
redis.register_function { function_name = 'tripline_6_read', callback = entry(read, true), flags = OOM }
redis.register_function { function_name = 'tripline_6_config', callback = config, flags = OOM }
