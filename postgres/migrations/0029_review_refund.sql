-- The merchant refund in review that a review holds, NULL for none. Such a
-- review is resolved only by an operator settling its refund, never with
-- the other open reviews of its order or delivery.
ALTER TABLE reviews ADD COLUMN order_refund_id bigint;
