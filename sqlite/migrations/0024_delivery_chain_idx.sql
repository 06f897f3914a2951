-- A delivery chains after the order's last delivery to the same subscriber
-- (after_id, looked up as each is written). On (order_id, id) that lookup
-- read every delivery of the order from the table to test its subscriber;
-- on (order_id, subscriber, id) it is one seek, on an index of the same
-- size. The order's deliveries, which DeliveryList reads by id, are still
-- one range of it.
DROP INDEX deliveries_order_idx;
CREATE INDEX deliveries_chain_idx ON deliveries (order_id, subscriber, id);
