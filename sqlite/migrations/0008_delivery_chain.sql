-- Deliveries of one order to one subscriber form a chain: after_id names the
-- delivery of the same order and subscriber written just before this one,
-- and a delivery is not claimed while that one is pending. The claim tests
-- the predecessor by its rowid, one probe per candidate.
ALTER TABLE deliveries ADD COLUMN after_id INTEGER;

-- Done deliveries are never claimed again; the others get their predecessor.
UPDATE deliveries SET after_id = (
    SELECT max(e.id) FROM deliveries e
    WHERE e.order_id = deliveries.order_id AND e.subscriber = deliveries.subscriber AND e.id < deliveries.id)
WHERE status <> 'done';

DROP INDEX deliveries_pending_order_idx;
