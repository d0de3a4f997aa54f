-- owns_delivery(stream, group, id, consumer, deliveries): whether the delivery an attempt
-- belongs to (``consumer``'s, the ``deliveries``-th of entry ``id``) is still the pending
-- one. XACK is group-wide: an attempt whose reservation was lost (its process stalled past
-- the reclaim delay, and another consumer claimed the entry) would otherwise acknowledge
-- the other consumer's live delivery, write over its outcome and free its slot. Every
-- script that ends an attempt asks this first, and writes nothing for an attempt it
-- answers no for. (A heartbeat's XCLAIM ... JUSTID does not count as a delivery; a claim
-- by another consumer, or by this one again, does.)
local function owns_delivery(stream, group, id, consumer, deliveries)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  return p[1] ~= nil and p[1][2] == consumer and tonumber(p[1][4]) == tonumber(deliveries)
end
