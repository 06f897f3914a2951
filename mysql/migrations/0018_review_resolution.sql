-- Who resolved a review and what they noted, both empty while it is open
-- (resolved_at NULL, the open range of reviews_open_idx). One statement, so
-- that an interrupted Migrate leaves the table as it was or as it is meant
-- to be. reviews_delivery_idx finds the reviews of a delivery that an
-- operator retries, and bounds the rows that resolving them locks.
ALTER TABLE reviews
    ADD COLUMN resolved_by TEXT NOT NULL DEFAULT (''),
    ADD COLUMN note TEXT NOT NULL DEFAULT (''),
    ADD INDEX reviews_delivery_idx (delivery_id);
