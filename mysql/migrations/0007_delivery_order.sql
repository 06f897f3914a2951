-- Deliveries of one order to one subscriber go out in order: a delivery is
-- not claimed while an earlier one of the same order and subscriber is
-- pending. The due index leads with the subscriber, after status, because
-- every claim names one, so a subscriber that lags does not slow the others'
-- claims; deliveries_pending_order_idx makes the test for an earlier pending
-- delivery one probe.
ALTER TABLE deliveries
    DROP INDEX deliveries_due_idx,
    ADD INDEX deliveries_due_idx (status, subscriber, next_attempt_at),
    ADD INDEX deliveries_pending_order_idx (order_id, subscriber, status, id);
