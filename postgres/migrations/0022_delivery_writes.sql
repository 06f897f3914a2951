-- Deliveries cheaper to write: a close with subscribers writes one per
-- subscriber in the statement of the close (issue 13).
--
-- Ids are drawn in blocks of 1024: a statement takes one nextval per
-- 1024 deliveries it writes and numbers them within the blocks, in
-- event order, rather than one nextval per row. Ids still grow along
-- every chain (after_id) and in the order of writing, which is all that
-- anything reads in them; they are no longer dense. A row that takes the
-- identity's default uses up a block.
ALTER TABLE deliveries ALTER COLUMN id SET INCREMENT BY 1024;

-- The search for the tail of a chain (the newest delivery of an order and
-- subscriber, which a new delivery names in after_id) is one probe that
-- ends at the row, instead of a read of every delivery of the order. It is
-- also the index of the deliveries of an order, by order_id alone.
DROP INDEX deliveries_order_idx;
CREATE INDEX deliveries_order_idx ON deliveries (order_id, subscriber, id);
