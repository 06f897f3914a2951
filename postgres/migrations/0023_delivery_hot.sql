-- Deliveries cheaper to lease and finish: a flash sale leases, renews and
-- finishes a delivery per closed order while the orders are still being
-- closed, on the same cores and the same database.
--
-- The lease (the claim's update of attempts, lease_owner, lease_until and
-- updated_at) and its renewals are HOT updates: they change no column that
-- an index names, so that they write no index entry and the new row
-- version stays on its page. Three things make them so:
--
-- * A claim no longer moves next_attempt_at to the end of the lease; it
--   skips leased rows by lease_until instead (see postgres/delivery.go), so
--   the due index keeps the row where it was.
-- * deliveries_dead_idx is on subscriber, which never changes, instead of
--   updated_at, which every update sets. It serves the counts of dead
--   deliveries (in all and by subscriber), which read no updated_at.
-- * fillfactor 50 leaves room on each page for the versions that the lease
--   and the finish write of the rows inserted there. It applies to pages
--   written from now on.
--
-- The attempt rows lose their foreign key to deliveries: an attempt row is
-- written only in the statement that finishes its delivery, from the row
-- that statement updated, and deliveries are never deleted. The key made
-- every attempt row a lookup and a KEY SHARE lock of its delivery, run as
-- a trigger query of its own.
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_delivery_id_fkey;

DROP INDEX deliveries_dead_idx;
CREATE INDEX deliveries_dead_idx ON deliveries (subscriber) WHERE status = 'dead';

ALTER TABLE deliveries SET (fillfactor = 50);
