-- Who resolved a review and what they noted, both empty while it is open
-- (resolved_at NULL, the condition of reviews_open_idx, which resolving
-- takes the review out of). reviews_delivery_idx finds the open reviews of
-- a delivery that an operator retries.
ALTER TABLE reviews ADD COLUMN resolved_by text NOT NULL DEFAULT '',
	ADD COLUMN note text NOT NULL DEFAULT '';
CREATE INDEX reviews_delivery_idx ON reviews (delivery_id) WHERE resolved_at IS NULL;
