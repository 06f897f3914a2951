-- Deliveries of one order to one subscriber form a chain: after_id names the
-- delivery of the same order and subscriber written just before this one,
-- and a delivery is not claimed while that one is pending. Testing the
-- predecessor by primary key keeps the claim's plan a primary-key probe per
-- candidate whatever the table's statistics say; the search for "an earlier
-- pending delivery of the same order" that it replaces could be planned as a
-- scan of the whole backlog per candidate on a table not yet analyzed.
--
-- No foreign key: the predecessor is a row of this table that is never
-- deleted, and a key would cost every insert a lookup and a row lock.
ALTER TABLE deliveries ADD COLUMN after_id bigint;

-- Done deliveries are never claimed again; the others get their predecessor.
UPDATE deliveries d SET after_id = (
	SELECT max(e.id) FROM deliveries e
	WHERE e.order_id = d.order_id AND e.subscriber = d.subscriber AND e.id < d.id)
WHERE d.status <> 'done';

DROP INDEX deliveries_pending_order_idx;
