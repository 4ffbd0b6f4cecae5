-- tripline shared breaker: the rules of tripline's in-process breaker as one atomic script.
--
-- KEYS (one hash tag, so a Redis Cluster keeps them in one slot)
--   1 record   hash: state, epoch, open deadline, counters, probe leases. Never expires unless
--              Closed (then an idle TTL).
--   2 window   count window: a string ring, one byte per outcome; time window: a hash of
--              buckets and totals. May expire or be evicted: a lost window is an empty window.
--   3 inflight hash: replica -> "epoch:count:until", calls in flight past the slow duration.
--   4 voters   hash: replica -> time of its last failure (the quorum rule).
--   5 events   stream of transitions, capped.
--
-- ARGV
--   1 op: admit | record | probe | batch | release | tick | operator | read
--   2 now in microseconds, or "" to use Redis TIME (clamped so it never goes backwards)
--   3 replica id
--   4..24 configuration (see CFG below)
--   25.. op arguments
--
-- Rates are compared in integers: failures * 1000000 >= threshold_ppm * calls.

local R, W, I, Q, E = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op = ARGV[1]
local replica = ARGV[3]

-- Integers as decimal strings: Lua's own number formatting switches to exponents past 14
-- digits, and epochs and microsecond clocks are 16.
local function fmt(n)
  return string.format('%.0f', n)
end

local a = 4
local function num()
  local v = tonumber(ARGV[a])
  a = a + 1
  return v
end
local CFG = {}
CFG.kind = num()        -- 0 count, 1 time
CFG.size = num()        -- ring size, or number of buckets
CFG.bucket = num()      -- bucket length (time window), us
CFG.min = num()         -- minimum calls (>= 1)
CFG.fppm = num()        -- failure-rate threshold, ppm
CFG.sppm = num()        -- slow-call-rate threshold, ppm
CFG.slow = num()        -- slow-call duration, us
CFG.consec = num()      -- consecutive failures, 0 = off
CFG.open = num()        -- open duration, us
CFG.mult = num()        -- backoff multiplier, 0 = no backoff
CFG.maxopen = num()     -- backoff cap, us
CFG.healthy = num()     -- backoff decays after this long Closed, us
CFG.maxhint = num()     -- cap on a Retry-After hint, us
CFG.k = num()           -- half-open probes
CFG.policy = num()      -- 0 all probes, 1 consecutive
CFG.maxwait = num()     -- half-open max wait, us, 0 = none
CFG.lease = num()       -- probe lease, us
CFG.auto = num()        -- automatic Open -> HalfOpen on tick, 0/1
CFG.idle = num()        -- idle TTL of a Closed record, ms
CFG.quorum = num()      -- distinct failing replicas needed to trip, 0 = off
CFG.qwithin = num()     -- how recent a replica's failure must be to count, us
local args = a

-- The clock: Redis's own unless the caller supplies one, never backwards.
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end

-- The record.
local rec = {}
do
  local flat = redis.call('HGETALL', R)
  for i = 1, #flat, 2 do
    rec[flat[i]] = flat[i + 1]
  end
end
local fresh = rec.st == nil
-- Fields as numbers, parsed once; written back once, formatted, at the end.
local num = {}
local dirty = {}
local gone = {}
local function getn(f)
  local v = num[f]
  if v == nil then
    v = false
    if rec[f] ~= nil then
      v = tonumber(rec[f]) or false
    end
    num[f] = v
  end
  return v or nil
end
local function geti(f)
  return getn(f) or 0
end
local function set(f, v)
  if type(v) == 'string' then
    rec[f] = v
  else
    num[f] = v
  end
  dirty[f] = true
  gone[f] = nil
end
local function unset(f)
  num[f] = false
  rec[f] = nil
  dirty[f] = nil
  gone[f] = true
end
local st = rec.st or 'closed'
local ep = geti('ep')
local last = geti('ln')
if fresh then
  -- A missing record reads as Closed. Its epoch starts from the clock so that results of a
  -- lost record's permits cannot match it.
  ep = now
  redis.call('DEL', W, I, Q)
end
if now < last then
  now = last
end
set('ln', now)
if fresh then
  set('st', 'closed')
  set('ep', ep)
  set('cs', now)
end

local trans = {}

-- Windows ------------------------------------------------------------------------------------

-- Count window: ring bytes 1 + failure + 2 * slow; the totals live in the record (wc, wf, ws,
-- wq = next slot). A ring lost to eviction or expiry resets the totals.
local checked = false
local function count_check()
  if checked then
    return
  end
  checked = true
  if geti('wc') > 0 and redis.call('EXISTS', W) == 0 then
    set('wc', 0)
    set('wf', 0)
    set('ws', 0)
    set('wq', 0)
  end
end

-- A batch of n outcomes works on the n ring slots it will write (one or two ranges, or the
-- whole ring), in memory, and writes them back once.
local ring = nil
local ring_ranges = {}
local ring_dirty = false
local function ring_load(n)
  ring = {}
  local size = CFG.size
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

local function ring_store()
  if not (ring and ring_dirty) then
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
end

-- Time window: hash fields h (newest bucket), c f s (totals), c<i> f<i> s<i> per slot.
local tw = nil
local function tw_load()
  if tw then
    return tw
  end
  local cur = math.floor(now / CFG.bucket)
  local h = redis.call('HMGET', W, 'h', 'c', 'f', 's')
  tw = { h = tonumber(h[1]), c = tonumber(h[2] or 0), f = tonumber(h[3] or 0), s = tonumber(h[4] or 0), cur = cur, dirty = false }
  if tw.h == nil then
    tw.h = cur
    tw.c, tw.f, tw.s = 0, 0, 0
  elseif cur > tw.h then
    local n = CFG.size
    if cur - tw.h >= n then
      redis.call('DEL', W)
      tw.c, tw.f, tw.s = 0, 0, 0
    else
      for e = tw.h + 1, cur do
        local slot = e % n
        local v = redis.call('HMGET', W, 'c' .. slot, 'f' .. slot, 's' .. slot)
        if v[1] then
          tw.c = tw.c - tonumber(v[1])
          tw.f = tw.f - tonumber(v[2])
          tw.s = tw.s - tonumber(v[3])
          redis.call('HDEL', W, 'c' .. slot, 'f' .. slot, 's' .. slot)
        end
      end
    end
    tw.h = cur
    tw.dirty = true
  end
  return tw
end

local function tw_save()
  if tw and tw.ac then
    local slot = tw.cur % CFG.size
    redis.call('HINCRBY', W, 'c' .. slot, tw.ac)
    redis.call('HINCRBY', W, 'f' .. slot, tw.af)
    redis.call('HINCRBY', W, 's' .. slot, tw.as)
  end
  if tw and tw.dirty then
    redis.call('HSET', W, 'h', fmt(tw.h), 'c', fmt(tw.c), 'f', fmt(tw.f), 's', fmt(tw.s))
    redis.call('PEXPIRE', W, math.ceil(CFG.bucket * (CFG.size + 1) / 1000))
  end
end

local function window()
  if CFG.kind == 0 then
    count_check()
    return geti('wc'), geti('wf'), geti('ws')
  end
  local t = tw_load()
  return t.c, t.f, t.s
end

local function window_add(failure, slow)
  if CFG.kind == 0 then
    count_check()
    local n = CFG.size
    local q = geti('wq')
    local slot = q % n
    local old
    if ring then
      old = ring[slot + 1] or 0
    else
      local o = redis.call('GETRANGE', W, slot, slot)
      old = 0
      if o ~= '' then
        old = string.byte(o)
      end
    end
    local c, f, s = geti('wc'), geti('wf'), geti('ws')
    if old ~= 0 then
      local v = old - 1
      c = c - 1
      f = f - (v % 2)
      s = s - math.floor(v / 2)
    end
    local byte = 1 + failure + 2 * slow
    if ring then
      ring[slot + 1] = byte
      ring_dirty = true
    else
      redis.call('SETRANGE', W, slot, string.char(byte))
    end
    set('wc', c + 1)
    set('wf', f + failure)
    set('ws', s + slow)
    set('wq', (q + 1) % n)
  else
    -- Every outcome of one script lands in the current bucket: sum them, write once.
    local t = tw_load()
    t.ac = (t.ac or 0) + 1
    t.af = (t.af or 0) + failure
    t.as = (t.as or 0) + slow
    t.c = t.c + 1
    t.f = t.f + failure
    t.s = t.s + slow
    t.dirty = true
  end
end

local function window_reset()
  redis.call('DEL', W, I, Q)
  if ring then
    ring = {}
    ring_dirty = false
  end
  set('wc', 0)
  set('wf', 0)
  set('ws', 0)
  set('wq', 0)
  set('cf', 0)
  -- A new epoch's window has not been evaluated: good results evaluate until one evaluation
  -- sees the minimum calls ('bo'), and the once-per-bucket gate starts over ('nse').
  unset('bo')
  unset('nse')
  tw = nil
end

-- Calls in flight past the slow duration, reported by each replica for the current epoch.
local function in_flight_slow()
  local flat = redis.call('HGETALL', I)
  local n = 0
  for i = 1, #flat, 2 do
    local e, c, u = string.match(flat[i + 1], '^(%d+):(%d+):(%d+)$')
    if tonumber(e) == ep and tonumber(u) > now then
      n = n + tonumber(c)
    elseif tonumber(u) <= now or tonumber(e) ~= ep then
      redis.call('HDEL', I, flat[i])
    end
  end
  return n
end

-- A replica's report of its calls in flight past the slow duration: "epoch:count", or "-1"
-- for none. A count of another epoch (the replica counted calls the current epoch does not
-- own) clears the replica's entry. Returns whether a report came.
local function report_in_flight(report)
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
  end
  return true
end

local function quorum_met()
  if CFG.quorum <= 1 then
    return true
  end
  local flat = redis.call('HGETALL', Q)
  local n = 0
  for i = 1, #flat, 2 do
    if tonumber(flat[i + 1]) + CFG.qwithin > now then
      n = n + 1
    end
  end
  return n >= CFG.quorum
end

-- Transitions --------------------------------------------------------------------------------

local function open_wait(hint)
  local wait = CFG.open
  local lv = geti('lv')
  if CFG.mult > 0 then
    local grown = CFG.open * CFG.mult ^ math.min(lv, 1000)
    if grown < CFG.maxopen then
      wait = math.floor(grown)
    else
      wait = CFG.maxopen
    end
  end
  wait = wait + (tonumber(ARGV[args]) or 0)
  if hint and hint > 0 then
    wait = math.max(wait, math.min(hint, CFG.maxhint))
  end
  return wait
end

local function clear_round()
  for i = 0, CFG.k - 1 do
    if getn('lt' .. i) then
      unset('lt' .. i)
      unset('ld' .. i)
    end
  end
  set('rr', 0)
  set('rf', 0)
  set('rs', 0)
  set('ru', 0)
end

local function transition(to, reason, hint)
  local from = st
  if not (from == 'open' and to == 'half-open') then
    ep = ep + 1
    set('ep', ep)
  end
  if to == 'open' then
    if from == 'half-open' then
      set('lv', geti('lv') + 1)
    elseif geti('eo') == 0 or now - geti('cs') >= CFG.healthy then
      set('lv', 0)
    else
      set('lv', geti('lv') + 1)
    end
    set('ou', now + open_wait(hint))
    set('eo', 1)
  elseif to == 'half-open' then
    set('hs', now)
  elseif to == 'closed' or to == 'metrics-only' then
    window_reset()
    set('cs', now)
  end
  if to == 'half-open' or from == 'half-open' then
    clear_round()
  end
  st = to
  set('st', to)
  set('tr', geti('tr') + 1)
  redis.call('XADD', E, 'MAXLEN', '~', 1000, '*', 'from', from, 'to', to, 'epoch', fmt(ep), 'reason', reason, 'at', fmt(now), 'replica', replica)
  -- The events stream and the quorum votes outlive no idle breaker: each gets the idle TTL
  -- when written.
  redis.call('PEXPIRE', E, CFG.idle)
  trans[#trans + 1] = from .. '>' .. to .. '>' .. reason
end

-- The trip rules. Returns a reason or nil.
local function trip_reason(consecutive, with_in_flight)
  if consecutive then
    return 'consecutive-failures'
  end
  local c, f, s = window()
  local min = math.max(CFG.min, 1)
  if CFG.kind ~= 0 then
    local above = 0
    if c >= min then
      above = 1
    end
    if geti('bo') ~= above then
      set('bo', above)
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

local function try_trip(consecutive, with_in_flight, hint)
  local reason = trip_reason(consecutive, with_in_flight)
  if reason and quorum_met() then
    transition('open', reason, hint)
    return true
  end
  return false
end

-- Half-open probes ---------------------------------------------------------------------------

local function leases()
  local live, soonest = 0, nil
  for i = 0, CFG.k - 1 do
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

local expired = 0
local function claim()
  if CFG.maxwait > 0 and now >= geti('hs') + CFG.maxwait then
    transition('open', 'half-open-timeout')
    return nil
  end
  for i = 0, CFG.k - 1 do
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
  local live, soonest = leases()
  if live + settled < CFG.k then
    for i = 0, CFG.k - 1 do
      if not getn('ld' .. i) then
        local token = geti('tok') + 1
        set('tok', token)
        set('lt' .. i, token)
        set('ld' .. i, now + CFG.lease)
        return { 'probe', i, token }
      end
    end
  end
  return { 'reject', soonest or -1 }
end

-- Operations ---------------------------------------------------------------------------------

local function admit()
  local report = ARGV[args + 1]
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
      local r = claim()
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

-- ARGV[args+1] epoch, +2 outcome (s, f, i), +3 slow (0/1), +4 in-flight report ("epoch:count" or -1),
-- +5 Retry-After hint in us (0 = none).
local function record_window(epoch, outcome, slow, hint)
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
  window_add(failure, slow)
  local consecutive = false
  if CFG.consec > 0 then
    if failure == 1 then
      local n = geti('cf') + 1
      set('cf', n)
      consecutive = n >= CFG.consec
    elseif geti('cf') ~= 0 then
      set('cf', 0)
    end
  end
  if (failure == 1 or slow == 1) and CFG.quorum > 1 then
    redis.call('HSET', Q, replica, fmt(now))
    redis.call('PEXPIRE', Q, CFG.idle)
  end
  if st == 'closed' then
    -- As in-process: failures, slow calls and a consecutive run always evaluate; a fast
    -- success evaluates a count window always (over a full ring it cannot raise a rate), a
    -- time window while the last evaluation saw fewer than the minimum calls (so the result
    -- that brings the window to the minimum is evaluated), and otherwise once per bucket: the
    -- first result past each bucket boundary, as old buckets expire only there.
    local evaluate = failure == 1 or slow == 1 or consecutive or CFG.kind == 0
    if not evaluate and geti('bo') == 0 then
      evaluate = true
    end
    if not evaluate and now >= geti('nse') then
      set('nse', (math.floor(now / CFG.bucket) + 1) * CFG.bucket)
      evaluate = true
    end
    if evaluate then
      try_trip(consecutive, failure == 1 or slow == 1, hint)
    end
  end
  return 'counted'
end

local function record()
  local epoch = tonumber(ARGV[args + 1])
  report_in_flight(ARGV[args + 4])
  return { record_window(epoch, ARGV[args + 2], tonumber(ARGV[args + 3]), tonumber(ARGV[args + 5])) }
end

-- ARGV[args+1] epoch, +2 outcomes: one character per call, s f i (fast) or S F I (slow),
-- oldest first, +3 in-flight report ("epoch:count" or -1).
local function batch()
  local epoch = tonumber(ARGV[args + 1])
  local outcomes = ARGV[args + 2]
  report_in_flight(ARGV[args + 3])
  if CFG.kind == 0 and epoch == ep then
    count_check()
    ring_load(#outcomes)
  end
  local counted, stale, ignored = 0, 0, 0
  for i = 1, #outcomes do
    local ch = string.sub(outcomes, i, i)
    local slow = 0
    local o = ch
    if ch == 'S' or ch == 'F' or ch == 'I' then
      slow = 1
      o = string.lower(ch)
    end
    local r = record_window(epoch, o, slow, 0)
    if r == 'counted' then
      counted = counted + 1
    elseif r == 'stale' then
      stale = stale + 1
    else
      ignored = ignored + 1
    end
  end
  return { 'batch', counted, stale, ignored }
end

-- ARGV[args+1] epoch, +2 slot, +3 token, +4 outcome, +5 slow, +6 hint us.
local function probe()
  local epoch = tonumber(ARGV[args + 1])
  local slot = ARGV[args + 2]
  local token = tonumber(ARGV[args + 3])
  if epoch ~= ep or st ~= 'half-open' or getn('lt' .. slot) ~= token then
    return { 'stale' }
  end
  unset('lt' .. slot)
  unset('ld' .. slot)
  local outcome = ARGV[args + 4]
  if outcome == 'i' then
    return { 'ignored' }
  end
  local failure = 0
  if outcome == 'f' then
    failure = 1
  end
  local slow = tonumber(ARGV[args + 5])
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
    transition('open', 'probes-failed', tonumber(ARGV[args + 6]))
  elseif to == 'closed' then
    transition('closed', 'probes-succeeded')
  end
  return { 'counted' }
end

-- ARGV[args+1] epoch, +2 slot, +3 token.
local function release()
  local slot = ARGV[args + 2]
  if tonumber(ARGV[args + 1]) == ep and st == 'half-open' and getn('lt' .. slot) == tonumber(ARGV[args + 3]) then
    unset('lt' .. slot)
    unset('ld' .. slot)
    return { 'released' }
  end
  return { 'stale' }
end

local function tick()
  if st == 'open' and CFG.auto == 1 and now >= geti('ou') then
    transition('half-open', 'open-elapsed')
  elseif st == 'half-open' and CFG.maxwait > 0 and now >= geti('hs') + CFG.maxwait then
    transition('open', 'half-open-timeout')
  end
  return { 'ok' }
end

-- ARGV[args+1] target state.
local function operator()
  local to = ARGV[args + 1]
  if st ~= to or to == 'closed' then
    transition(to, 'operator')
  end
  return { 'ok' }
end

local reply
if op == 'admit' then
  reply = admit()
elseif op == 'record' then
  reply = record()
elseif op == 'probe' then
  reply = probe()
elseif op == 'batch' then
  reply = batch()
elseif op == 'release' then
  reply = release()
elseif op == 'tick' then
  reply = tick()
elseif op == 'operator' then
  reply = operator()
elseif op == 'read' then
  local c, f, s = window()
  local live = leases()
  reply = { 'read', c, f, s, in_flight_slow(), live, geti('tr') }
else
  return redis.error_reply('tripline: unknown op ' .. tostring(op))
end

-- Write back what changed; a record that is not Closed never expires.
ring_store()
local flat = {}
for f in pairs(dirty) do
  flat[#flat + 1] = f
  if f == 'st' then
    flat[#flat + 1] = rec.st
  else
    flat[#flat + 1] = fmt(num[f])
  end
end
redis.call('HSET', R, unpack(flat))
local del = {}
for f in pairs(gone) do
  del[#del + 1] = f
end
if #del > 0 then
  redis.call('HDEL', R, unpack(del))
end
if st == 'closed' then
  redis.call('PEXPIRE', R, CFG.idle)
  if CFG.kind == 0 then
    redis.call('PEXPIRE', W, CFG.idle)
  end
else
  redis.call('PERSIST', R)
end
tw_save()

-- Reply: verdict fields (up to 4), then state, epoch, open deadline, now, expired leases, and
-- the transitions made, as "from>to>reason".
local function field(v)
  if v == nil then
    return ''
  elseif type(v) == 'number' then
    return fmt(v)
  end
  return v
end
local out = { reply[1], field(reply[2]), field(reply[3]), field(reply[4]), field(reply[5]), field(reply[6]), field(reply[7]), st, fmt(ep), fmt(geti('ou')), fmt(now), fmt(expired) }
for i = 1, #trans do
  out[#out + 1] = trans[i]
end
return out
