-- Deliveries of one order to one subscriber go out in order: a delivery is
-- not claimed while an earlier one of the same order and subscriber is
-- pending. The due index leads with the subscriber because every claim names
-- one, so a subscriber that lags does not slow the others' claims.
DROP INDEX deliveries_due_idx;
CREATE INDEX deliveries_due_idx ON deliveries (subscriber, next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_pending_order_idx ON deliveries (order_id, subscriber, id) WHERE status = 'pending';
