-- ended is a delivery's attempts when an attempt of it last ended through
-- its subscriber (not cut short by a stop or a lost lease), or when an
-- operator last retried it; NULL: none since it was written. attempts
-- minus ended is the number of claims in a row whose attempts did not end
-- (lapse.Delivery.Unfinished): it tells a delivery whose attempts never
-- end, which dies of it a few claims past its schedule, from one whose
-- schedule was shortened under it, which gets its next attempt. A claim
-- does not write it, and NULL takes no room in a row.
--
-- The attempts of the deliveries pending now are taken as ended: a
-- delivery leased now counts its attempt in flight as ended, one fewer
-- than it may be.
ALTER TABLE deliveries ADD COLUMN ended INT NULL;
UPDATE deliveries SET ended = attempts WHERE status = 'pending';
